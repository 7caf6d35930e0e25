"""Decompression backends behind one protocol, and the routing table."""
