"""Kubernetes library behind ``hpq eks``: cluster access from the EKS API and the test jobs."""
