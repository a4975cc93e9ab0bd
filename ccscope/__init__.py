"""ccscope: which congestion control does this web server run?"""

__version__ = "0.1.0"
