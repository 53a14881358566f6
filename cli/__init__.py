"""The hpq command line: thin click commands over library code."""
