"""The ``hwdecomp`` command line."""
