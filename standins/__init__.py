"""Stand-ins: what hpq meets on AWS and on a HyperPod node, for the rehearsal and the tests alike.

Each module stands in for one real thing, answers what it answers and refuses what it refuses, and says
which reference its shapes come from:

- ``imds``: EC2's instance metadata service, IMDSv2 (one server: a rehearsal node's, or the tests' nodes');
- ``moto``: the fixes moto needs to answer like AWS (FSx, SageMaker HyperPod), for every moto hpq starts;
- ``rendition``: the moto rendition of the templates (what moto's CloudFormation can create;
  ``hpq deploy --emulate moto`` and the rehearsal);
- ``fsx``: FSx for Lustre on a node (a shared directory and a ``mount.lustre``);
- ``hyperpod``: what the HyperPod service and its agents do to a node (resource_config.json, the
  controller's slurm.conf, the lifecycle prefix staged and OnCreate run);
- ``systemctl``: systemd's ``systemctl`` on a node where systemd is not PID 1 (units, drop-ins, masking);
- ``amp``: an Amazon Managed Service for Prometheus workspace (a real Prometheus behind a SigV4 check);
- ``http_server``: the one way a stand-in listens.

None of it ships in the node bundle (lifecycle/bundle.py): a real node has the real things.
"""
