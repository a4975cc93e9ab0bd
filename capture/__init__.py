"""Measurement plane: link emulator shell, clients, packet capture to traces."""
