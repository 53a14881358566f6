"""Every command-line value hpq accepts, checked in one place before any AWS call or file write.

Each check is a click parameter type (or a small function for checks that span several
options), so a bad value ends as ``hpq: error: Invalid value for 'X': ...`` with exit 2 before
the command body runs: no credentials lookup, no network, nothing written.

One module per kind of value, every public name re-exported here (commands use ``inputs.X``):
``text`` (the base types and the error line's quoting), ``names`` (names by AWS's and Kubernetes'
rules), ``choices`` (hpq's own lists: variants, sizes, instance types), ``numbers`` (counts and
seconds), ``files`` (paths to read or write), ``options`` (checks across one option's values) and
``aws`` (the ``--region`` type and the services each command needs). The checks of the AWS settings
(endpoints, the AWS_* environment, profiles) are the AWS library's own (``hpq.aws.settings``), re-exported
here. Importing any of them loads click only: botocore is imported inside the functions that need it,
so ``hpq --help`` stays fast.

The name rules are AWS's and Kubernetes' own, not guesses:
- HyperPod (SageMaker API): ``ClusterName``, ``ClusterNameOrArn``, ``ClusterNodeId``,
  ``ClusterInstanceGroupName``, ``ClusterInstanceCount`` and ``ClusterEbsVolumeConfig`` shapes of
  botocore's sagemaker service model (``botocore/data/sagemaker/*/service-2.json``);
- CloudFormation: ``StackNameOrId`` in botocore's cloudformation model, and the CreateStack
  rule "alphanumeric characters and hyphens, starting with a letter, at most 128 characters"
  (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html);
- EKS: ``ClusterName`` in botocore's eks model (1-100 characters);
- FSx: ``FileSystemId``, ``DNSName``, ``LustreFileSystemMountName``, ``StorageCapacity`` in botocore's fsx model;
- Kubernetes object names: RFC 1123 labels and DNS subdomains
  (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/);
- container image references: the grammar of github.com/distribution/reference (regexp.go);
- regions: botocore's own endpoint data (``endpoints.json``), read locally.
tests/cli/test_inputs.py compares these patterns with botocore's models so they cannot drift.
"""

from __future__ import annotations

from hpq.aws.settings import (  # noqa: F401
    check_aws_environment,
    check_aws_inputs,
    check_endpoint_environment,
    check_profile,
    endpoint_problem,
    known_regions,
    region_problem,
    resolve_region,
    service_regions,
)
from hpq.cli.inputs.aws import (  # noqa: F401
    REGION,
    SERVICES_DEPLOY,
    SERVICES_EKS,
    SERVICES_NODES,
    SERVICES_PUBLISH,
    SERVICES_QUOTAS,
    Region,
)
from hpq.cli.inputs.choices import (  # noqa: F401
    ACCELERATED_TYPE,
    CPU_TYPE,
    INSTANCE_TYPE,
    NCCL_DEBUG,
    SIZE,
    VARIANT,
    InstanceType,
    NcclDebug,
    Size,
    Variant,
)
from hpq.cli.inputs.files import (  # noqa: F401
    ExistingDir,
    InputFile,
    OutputDir,
    WritableFile,
)
from hpq.cli.inputs.names import (  # noqa: F401
    BUCKET,
    CLAIM_NAME,
    EKS_CLUSTER,
    EKS_NAME_MAX,
    EKS_NAME_RE,
    FSX_DNS,
    FSX_DNS_RE,
    FSX_ID,
    FSX_ID_RE,
    FSX_MOUNT_NAME,
    FSX_MOUNT_NAME_RE,
    HOST,
    HYPERPOD_ARN_RE,
    HYPERPOD_CLUSTER,
    IFACE,
    IFACE_RE,
    IMAGE,
    IMAGE_NAME_MAX,
    IMAGE_PATH,
    IMAGE_RE,
    INSTANCE_GROUP,
    JOB_NAME,
    JOB_NAME_MAX,
    K8S_LABEL_RE,
    K8S_SUBDOMAIN_RE,
    NAMESPACE,
    NODE,
    NODE_ID_RE,
    STACK,
    STACK_ARN_RE,
    STACK_NAME,
    STACK_NAME_MAX,
    STACK_NAME_RE,
    USER,
    USER_RE,
    Bucket,
    NodeRef,
    check_cluster_name_for_stack,
)
from hpq.cli.inputs.numbers import (  # noqa: F401
    EBS_GIB,
    EBS_GIB_MAX,
    FSX_CAPACITY,
    FSX_CAPACITY_MAX,
    FSX_GIB,
    GPUS,
    INSTANCE_COUNT,
    MAX_INSTANCES,
    NODES,
    POLL_SECONDS,
    PORT,
    TEST_NODES,
    TIMEOUT,
    Count,
    FsxCapacity,
    Seconds,
)
from hpq.cli.inputs.options import (  # noqa: F401
    given,
    non_empty_command,
    not_applicable,
    option_flag,
    refuse_inapplicable,
    refuse_repeated_options,
    unique_keys,
)
from hpq.cli.inputs.text import (  # noqa: F401
    KEY_VALUE,
    KeyValue,
    NameOrArn,
    Pattern,
    ShellWords,
    Text,
)
from hpq.errors import UsageError  # noqa: F401 - what the checks raise, as `inputs.UsageError` before the split
from hpq.lifecycle.names import HYPERPOD_NAME_PATTERN  # noqa: F401 - sagemaker ClusterName, one rule
from hpq.text import file_kind, show, unprintable, unusable  # noqa: F401
