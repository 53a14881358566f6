"""The four variants and the size presets: which nested stacks, with which typed configs.

Variants differ only here, at the top: orchestrator (Slurm or EKS) and accelerator
(GPU or Trainium). Every stack module is shared.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpq import vocab
from hpq.cfn import (
    common,
    eks,
    helm,
    hyperpod,
    iam,
    networking,
    observability,
    offers,
    regions,
    s3,
    security,
    storage,
    validation,
)
from hpq.lifecycle import catalog


@dataclass(frozen=True)
class Variant:
    name: str
    orchestrator: str  # vocab.SLURM | vocab.EKS
    accelerator: str  # catalog.GPU | catalog.TRAINIUM
    default_worker_type: str

    @property
    def eks(self) -> bool:
        return self.orchestrator == vocab.EKS

    @property
    def slurm(self) -> bool:
        return self.orchestrator == vocab.SLURM

    @property
    def accelerator_label(self) -> str:
        return "GPU" if self.accelerator == catalog.GPU else "Trainium"

    def worker_types(self) -> list[str]:
        return catalog.names([self.accelerator])


@dataclass(frozen=True)
class Size:
    name: str
    worker_count: int
    fsx_capacity_gib: int
    ebs_gb: int


VARIANTS: dict[str, Variant] = {
    # g5.16xlarge: the cheapest GPU node the measured runs validated end to end (TCP transport;
    # docs/design.md, "The measured runs").
    "slurm-gpu": Variant("slurm-gpu", vocab.SLURM, catalog.GPU, "ml.g5.16xlarge"),
    "slurm-trn": Variant("slurm-trn", vocab.SLURM, catalog.TRAINIUM, "ml.trn1.32xlarge"),
    "eks-gpu": Variant("eks-gpu", vocab.EKS, catalog.GPU, "ml.g5.16xlarge"),
    "eks-trn": Variant("eks-trn", vocab.EKS, catalog.TRAINIUM, "ml.trn1.32xlarge"),
}
SIZES: dict[str, Size] = {
    "small": Size("small", worker_count=2, fsx_capacity_gib=vocab.DEFAULT_FSX_GIB, ebs_gb=vocab.DEFAULT_EBS_GB),
    "medium": Size("medium", worker_count=4, fsx_capacity_gib=4800, ebs_gb=1000),
    "large": Size("large", worker_count=16, fsx_capacity_gib=19200, ebs_gb=2000),
}
assert tuple(VARIANTS) == vocab.VARIANTS and tuple(SIZES) == vocab.SIZES

# Stack names, in creation order; each becomes <Name>.json and root resource <Name>Stack.
NETWORKING, SECURITY, STORAGE, S3, IAM, EKS, HELM, HYPERPOD, OBSERVABILITY, VALIDATION = (
    "Networking", "Security", "Storage", "S3", "IAM", "EKS", "Helm", "HyperPod", "Observability", "Validation")


def stack_names(variant: Variant) -> list[str]:
    out = [NETWORKING, SECURITY, STORAGE, S3, IAM]
    if variant.eks:
        out += [EKS, HELM]
    return out + [HYPERPOD, OBSERVABILITY, VALIDATION]


def controller_types() -> list[str]:
    """Controller/login types with an on-demand offer in every HyperPod region (cfn/offers.py, cfn/regions.py):
    cfn-lint resolves the parameter's every allowed value in every region (W1030), and a published template
    serves them all (cfn-lint 1.58.0: ml.m5.2xlarge has no offer in ap-southeast-3)."""
    return [t for t in catalog.controller_types()
            if all(offers.has_on_demand_offer(t, r) for r in regions.hyperpod_regions())]


def nested_templates(variant: Variant, size: Size, eks_config: eks.EksConfig | None = None
                     ) -> dict[str, common.Template]:
    """Stack name -> troposphere Template for every nested stack of the variant (``eks_config``: the render date
    and any Kubernetes version asked for beyond HyperPod's list, cfn/eks.py)."""
    builders = {
        NETWORKING: lambda: networking.build(networking.NetworkingConfig(eks=variant.eks)),
        SECURITY: lambda: security.build(security.SecurityConfig()),
        STORAGE: lambda: storage.build(storage.StorageConfig(default_capacity_gib=size.fsx_capacity_gib)),
        S3: lambda: s3.build(s3.S3Config(slurm=variant.slurm)),
        IAM: lambda: iam.build(iam.IamConfig(eks=variant.eks)),
        EKS: lambda: eks.build(eks_config or eks.EksConfig()),
        HELM: lambda: helm.build(helm.HelmConfig()),
        HYPERPOD: lambda: hyperpod.build(hyperpod.HyperPodConfig(
            orchestrator=variant.orchestrator, worker_types=tuple(variant.worker_types()),
            default_worker_type=variant.default_worker_type, default_worker_count=size.worker_count,
            default_ebs_gb=size.ebs_gb, controller_types=tuple(controller_types()))),
        OBSERVABILITY: lambda: observability.build(observability.ObservabilityConfig(eks=variant.eks)),
        VALIDATION: lambda: validation.build(validation.ValidationConfig()),
    }
    return {name: builders[name]() for name in stack_names(variant)}
