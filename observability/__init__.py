"""Dashboards, alert rules and the DCGM field selection hpq ships for observability (package data).

Grafana dashboard JSON under ``dashboards/`` (importable into Amazon Managed Grafana or any open-source
Grafana with a Prometheus data source), Prometheus alert rules under ``alerts/`` (the rule-file format that
both Prometheus and Amazon Managed Service for Prometheus rule groups take), and ``dcgm-metrics.csv``, the
DCGM fields AWS's HyperPod reference selects for dcgm-exporter, which the dashboards draw from (hpq's own GPU
writer, scripts/gpu_metrics.py, writes those it can read through nvidia-smi; bench/nvml_dcgm_fields.py reads
them all through NVML). docs/observability.md says what creates what, and where.
"""

from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD_DIR = os.path.join(HERE, "dashboards")
ALERT_DIR = os.path.join(HERE, "alerts")
DCGM_CSV = os.path.join(HERE, "dcgm-metrics.csv")


def dashboard_files() -> list[str]:
    """Every dashboard JSON shipped, sorted."""
    return sorted(os.path.join(DASHBOARD_DIR, n) for n in os.listdir(DASHBOARD_DIR) if n.endswith(".json"))


def alert_rule_files() -> list[str]:
    """Every Prometheus rule file shipped, sorted."""
    return sorted(os.path.join(ALERT_DIR, n) for n in os.listdir(ALERT_DIR) if n.endswith((".yaml", ".yml")))


def dcgm_fields() -> list[str]:
    """The DCGM field names in ``dcgm-metrics.csv`` (dcgm-exporter exports each under the same name)."""
    fields = []
    with open(DCGM_CSV) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#"):
                fields.append(line.split(",", 1)[0].strip())
    return fields
