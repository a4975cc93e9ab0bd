"""Workers: the measurement pipeline (tasks), Celery (one queue per vantage point, beat for
campaigns) and the broker-less embedded runner. See tasks.py for the exactly-once argument."""
