"""AWS library behind the commands: sessions and errors, stacks, S3 assets, deploy, events, HyperPod, SSH."""
