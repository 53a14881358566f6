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

# FSx for Lustre capacity on SSD (PERSISTENT_2, the deployment type hpq creates; PERSISTENT_1 and SCRATCH_2 alike):
# "the valid values are 1200 GiB, 2400 GiB, and increments of 2400 GiB" (CreateFileSystem StorageCapacity,
# https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html; the same rule in
# https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-fsx-filesystem.html StorageCapacity).
# The one rule every place checks: the command-line input, the EKS fsx manifest and the storage template.
FSX_MIN_GIB = 1200
FSX_STEP_GIB = 2400
FSX_MAX_GIB = 2147483647  # the API's Integer bound for StorageCapacity
FSX_RULE = "1200, 2400 or a multiple of 2400 GiB"  # quoted by help texts and error messages
# The storage template lists its allowed sizes (a CloudFormation parameter's AllowedValues cannot say "a
# multiple of"): every valid size up to this one; a larger filesystem is made outside the template.
FSX_TEMPLATE_MAX_GIB = 38400


def fsx_capacity_ok(gib: int) -> bool:
    """Whether ``gib`` is a capacity FSx for Lustre accepts for an SSD filesystem (:data:`FSX_RULE`)."""
    if isinstance(gib, bool) or not isinstance(gib, int):
        return False
    return gib == FSX_MIN_GIB or (FSX_STEP_GIB <= gib <= FSX_MAX_GIB and gib % FSX_STEP_GIB == 0)


def fsx_capacities(up_to: int = FSX_TEMPLATE_MAX_GIB) -> tuple:
    """Every valid capacity up to ``up_to`` GiB, smallest first (the storage template's AllowedValues)."""
    return tuple(g for g in (FSX_MIN_GIB, *range(FSX_STEP_GIB, up_to + 1, FSX_STEP_GIB)) if g <= up_to)


def orchestrator_of(variant: str) -> str:
    """The orchestrator a variant name starts with ('slurm-gpu' -> 'slurm')."""
    orchestrator = variant.split("-", 1)[0]
    if orchestrator not in ORCHESTRATORS:
        raise ValueError(f"unknown variant {variant!r}; choose one of: {', '.join(VARIANTS)}")
    return orchestrator
