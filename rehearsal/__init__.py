"""``hpq rehearse``: a whole HyperPod cluster on one Linux machine, offline.

The pieces, each a module with one job:

- ``plan``: names, addresses and instance ids of one rehearsal, derived from its run id;
- ``netns``: the bridge and one network namespace (veth pair) per node;
- ``node``: a node's private root (overlay of the host's /), mount and UTS namespaces, its "boot";
- ``imds``: the IMDSv2 server every node gets at 169.254.169.254 (standard library only);
- ``aws``: the embedded moto server and the real ``hpq deploy`` path against it;
- ``hyperpod``: what HyperPod itself does on a node (resource_config.json, the controller's
  slurm.conf, downloading the lifecycle prefix and running OnCreate);
- ``fsx``: the FSx for Lustre stand-in (a shared directory and its mount helper);
- ``validate``: Slurm readiness and the validation commands over real SSH;
- ``state``: what a run created, so ``hpq rehearse down`` can remove a kept one;
- ``run``: the orchestration (stages, progress, teardown on every exit path);
- ``report``: the summary table and the JSON result.

Nothing here is imported by ``hpq --help``.
"""
