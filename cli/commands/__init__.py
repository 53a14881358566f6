"""The click commands: thin shells over hpq.cli.aws, hpq.cli.eks and the other library packages."""
