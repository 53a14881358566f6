"""``hpq rehearse``: a whole HyperPod cluster on one Linux machine, offline.

The pieces, each a module with one job:

- ``plan``: names, addresses and instance ids of one rehearsal, derived from its run id;
- ``netns``: the bridge and one network namespace (veth pair) per node;
- ``node``: a node's private root (overlay of the host's /), mount and UTS namespaces, its "boot";
- ``aws``: the embedded moto server and the real ``hpq deploy`` path against it;
- ``validate``: Slurm readiness, the SSH hop, the job's environment, and the test requests the stages run;
- ``backend``: the rehearsal as a validation backend (its stages, and ``hpq test`` on a kept one);
- ``state``: what a run created, so ``hpq rehearse down`` can remove a kept one;
- ``run``: the orchestration (stages, progress, teardown on every exit path);
- ``report``: the summary table and the JSON result.

What stands in for AWS and HyperPod (IMDS, moto's fixes and rendition, FSx, the HyperPod agent) is
in hpq.standins, shared with the tests. Nothing here is imported by ``hpq --help``.
"""
