"""The words every layer of hpq shares: orchestrators, variants, size presets.

One home for each: templates (hpq.cfn), the AWS library, the command line and the node-side code all
import them from here. Shipped in the node bundle (hpq.lifecycle.bundle), so standard library only and
Python 3.7 like the rest of the node-side code.
"""

# The two orchestrators HyperPod offers (the SageMaker API's ClusterOrchestrator: Slurm or Eks).
SLURM = "slurm"
EKS = "eks"
ORCHESTRATORS = (SLURM, EKS)

# What `hpq synth|deploy|publish|rehearse VARIANT` accept: <orchestrator>-<accelerator>.
VARIANTS = ("slurm-gpu", "slurm-trn", "eks-gpu", "eks-trn")
# Size presets (worker count, FSx capacity, EBS size: hpq.cfn.variants.SIZES).
SIZES = ("small", "medium", "large")
# The small preset's storage (hpq.cfn.variants.SIZES["small"]), and the default of every command and library
# call that asks for an FSx or EBS size: FSx for Lustre's smallest filesystem, and each node's EBS volume.
DEFAULT_FSX_GIB = 1200
DEFAULT_EBS_GB = 500


def orchestrator_of(variant: str) -> str:
    """The orchestrator a variant name starts with ('slurm-gpu' -> 'slurm')."""
    orchestrator = variant.split("-", 1)[0]
    if orchestrator not in ORCHESTRATORS:
        raise ValueError(f"unknown variant {variant!r}; choose one of: {', '.join(VARIANTS)}")
    return orchestrator
