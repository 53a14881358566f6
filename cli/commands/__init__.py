"""The click commands: thin shells over hpq.aws, hpq.kube and the other library packages."""
