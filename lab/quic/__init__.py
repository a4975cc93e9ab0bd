"""The lab's QUIC servers: several independent QUIC stacks, each with known congestion controls
and a qlog per connection as ground truth. See registry.py for which stack runs what where."""
