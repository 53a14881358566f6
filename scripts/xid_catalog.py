"""NVIDIA's Xid catalog, reduced to what a node check needs: the code, its mnemonic and the immediate action.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog" (Ampere and newer GPUs),
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, read 2026-11-26: the columns
"Mnemonic" and "Resolution Bucket (Immediate Action)". Only codes the catalog marks as applying to A100 or
H100 are listed; any other code is unknown here and is reported for investigation, never ignored.

The catalog's buckets are turned into the actions a HyperPod operator has (``ACTION_*``). HyperPod offers
no per-GPU reset, so the catalog's RESET_GPU becomes a node reboot (``BatchRebootClusterNodes``, which AWS
documents for recovering a faulty node: docs.aws.amazon.com/sagemaker/latest/dg/
sagemaker-hyperpod-eks-resiliency-manual.html); a fault still present after that reboot is a replacement.

Standard library only: it runs on cluster nodes.
"""

from __future__ import annotations

import re
from typing import Dict, NamedTuple, Optional, Tuple

# What an operator does about a finding, mildest first.
ACTION_NONE = "none"          # nothing on the node: the application restarts (or nothing at all)
ACTION_DRAIN = "drain"        # keep jobs off the node until a person looks (scontrol DRAIN / kubectl cordon)
ACTION_REBOOT = "reboot"      # BatchRebootClusterNodes
ACTION_REPLACE = "replace"    # BatchReplaceClusterNodes
ACTIONS: Tuple[str, ...] = (ACTION_NONE, ACTION_DRAIN, ACTION_REBOOT, ACTION_REPLACE)

SEVERITY_INFO = "info"
SEVERITY_WARNING = "warning"
SEVERITY_CRITICAL = "critical"
SEVERITIES: Tuple[str, ...] = (SEVERITY_INFO, SEVERITY_WARNING, SEVERITY_CRITICAL)


class XidEntry(NamedTuple):
    mnemonic: str
    bucket: str  # the catalog's "Resolution Bucket (Immediate Action)"


# code -> (mnemonic, immediate action bucket), as the catalog lists them for A100/H100.
CATALOG: Dict[int, XidEntry] = {code: XidEntry(*row) for code, row in {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP"),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP"),
    14: ("ROBUST_CHANNEL_FAKE_ERROR", "IGNORE"),
    25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "RESTART_APP"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "RESTART_APP"),
    37: ("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "IGNORE"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE"),
    39: ("ROBUST_CHANNEL_CE0_ERROR", "RESTART_APP"),
    40: ("ROBUST_CHANNEL_CE1_ERROR", "RESTART_APP"),
    41: ("ROBUST_CHANNEL_CE2_ERROR", "RESTART_APP"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48"),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS"),
    60: ("ROBUST_CHANNEL_SEC2_ERROR", "RESTART_APP"),
    62: ("PMU_HALT_ERROR", "RESET_GPU"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU"),
    66: ("ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "IGNORE"),
    67: ("ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "IGNORE"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP"),
    70: ("ROBUST_CHANNEL_CE3_ERROR", "RESTART_APP"),
    71: ("ROBUST_CHANNEL_CE4_ERROR", "RESTART_APP"),
    72: ("ROBUST_CHANNEL_CE5_ERROR", "RESTART_APP"),
    74: ("NVLINK_ERROR", "WORKFLOW_NVLINK_ERR"),
    75: ("ROBUST_CHANNEL_CE6_ERROR", "RESTART_APP"),
    76: ("ROBUST_CHANNEL_CE7_ERROR", "RESTART_APP"),
    77: ("ROBUST_CHANNEL_CE8_ERROR", "RESTART_APP"),
    78: ("VGPU_START_ERROR", "UPDATE_SWFW"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM"),
    80: ("PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP"),
    82: ("ROBUST_CHANNEL_NVJPG0_ERROR", "RESTART_APP"),
    83: ("ROBUST_CHANNEL_NVDEC1_ERROR", "RESTART_APP"),
    84: ("ROBUST_CHANNEL_NVDEC2_ERROR", "RESTART_APP"),
    85: ("ROBUST_CHANNEL_CE9_ERROR", "RESTART_APP"),
    86: ("ROBUST_CHANNEL_OFA0_ERROR", "RESTART_APP"),
    88: ("ROBUST_CHANNEL_NVDEC3_ERROR", "RESTART_APP"),
    89: ("ROBUST_CHANNEL_NVDEC4_ERROR", "RESTART_APP"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "IGNORE"),
    93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "IGNORE"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU"),
    96: ("ROBUST_CHANNEL_NVDEC5_ERROR", "RESTART_APP"),
    97: ("ROBUST_CHANNEL_NVDEC6_ERROR", "RESTART_APP"),
    98: ("ROBUST_CHANNEL_NVDEC7_ERROR", "RESTART_APP"),
    99: ("ROBUST_CHANNEL_NVJPG1_ERROR", "RESTART_APP"),
    100: ("ROBUST_CHANNEL_NVJPG2_ERROR", "RESTART_APP"),
    101: ("ROBUST_CHANNEL_NVJPG3_ERROR", "RESTART_APP"),
    102: ("ROBUST_CHANNEL_NVJPG4_ERROR", "RESTART_APP"),
    103: ("ROBUST_CHANNEL_NVJPG5_ERROR", "RESTART_APP"),
    104: ("ROBUST_CHANNEL_NVJPG6_ERROR", "RESTART_APP"),
    105: ("ROBUST_CHANNEL_NVJPG7_ERROR", "RESTART_APP"),
    106: ("SMBPBI_TEST_MESSAGE", "IGNORE"),
    107: ("SMBPBI_TEST_MESSAGE_SILENT", "IGNORE"),
    108: ("NVLINK_REMOTE_TRANSLATION_ERROR", "IGNORE"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU"),
    110: ("SEC_FAULT_ERROR", "RESET_GPU"),
    119: ("GSP_RPC_TIMEOUT", "RESET_GPU"),
    120: ("GSP_ERROR", "RESET_GPU"),
    136: ("ALI_TRAINING_FAIL", "RESET_GPU"),
    137: ("NVLINK_PRIV_ERR", "IGNORE"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU"),
    141: ("ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE"),
    143: ("GPU_INIT_ERROR", "RESET_GPU"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "XID_154"),
    156: ("RESOURCE_RETIREMENT_EVENT", "RESET_GPU"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "IGNORE"),
    158: ("GPU_FATAL_TIMEOUT", "RESET_GPU"),
}.items()}

# Bucket -> (severity, action). RESTART_APP: the application is at fault or must restart; the node is fine.
# WORKFLOW_XID_45 follows the other Xid it accompanies, so on its own it asks for nothing.
# WORKFLOW_XID_48: the catalog says a GPU reset or node reboot clears a double-bit ECC error.
# WORKFLOW_NVLINK_ERR: the catalog says a GPU reset or node reboot clears Xid 74.
# CHECK_MECHANICALS (auxiliary power not connected) is hardware a reboot cannot mend.
_BUCKETS: Dict[str, Tuple[str, str]] = {
    "IGNORE": (SEVERITY_INFO, ACTION_NONE),
    "RESTART_APP": (SEVERITY_INFO, ACTION_NONE),
    "WORKFLOW_XID_45": (SEVERITY_INFO, ACTION_NONE),
    "RESET_GPU": (SEVERITY_CRITICAL, ACTION_REBOOT),
    "RESTART_BM": (SEVERITY_CRITICAL, ACTION_REBOOT),
    "RESTART_VM": (SEVERITY_CRITICAL, ACTION_REBOOT),
    "WORKFLOW_XID_48": (SEVERITY_CRITICAL, ACTION_REBOOT),
    "WORKFLOW_NVLINK_ERR": (SEVERITY_CRITICAL, ACTION_REBOOT),
    "CHECK_MECHANICALS": (SEVERITY_CRITICAL, ACTION_REPLACE),
    "UPDATE_SWFW": (SEVERITY_WARNING, ACTION_DRAIN),
}

# Xid 154 names the recovery the driver now asks for ("... changed from 0x0 (None) to 0x2 (Node Reboot
# Required)"); the catalog lists the values None, Drain P2P, Drain and Reset, GPU Reset Required and Node
# Reboot Required.
_XID154_TO_RE = re.compile(r"\bto\s+0x[0-9a-fA-F]+\s*\(([^)]{1,40})\)")
_XID154_ACTIONS: Dict[str, Tuple[str, str]] = {
    "none": (SEVERITY_INFO, ACTION_NONE),
    "drain p2p": (SEVERITY_WARNING, ACTION_DRAIN),
    "drain and reset": (SEVERITY_CRITICAL, ACTION_REBOOT),
    "gpu reset required": (SEVERITY_CRITICAL, ACTION_REBOOT),
    "node reboot required": (SEVERITY_CRITICAL, ACTION_REBOOT),
}


def classify(code: int, message: str = "") -> Tuple[str, str, str]:
    """(mnemonic, severity, action) for one Xid; an unknown code is a warning to drain and look at."""
    entry = CATALOG.get(code)
    if entry is None:
        return "UNKNOWN_XID", SEVERITY_WARNING, ACTION_DRAIN
    if entry.bucket == "XID_154":
        match = _XID154_TO_RE.search(message)
        wanted = _XID154_ACTIONS.get(match.group(1).strip().lower()) if match else None
        severity, action = wanted or (SEVERITY_WARNING, ACTION_DRAIN)
        return entry.mnemonic, severity, action
    severity, action = _BUCKETS.get(entry.bucket, (SEVERITY_WARNING, ACTION_DRAIN))
    return entry.mnemonic, severity, action


def bucket(code: int) -> Optional[str]:
    entry = CATALOG.get(code)
    return entry.bucket if entry else None
