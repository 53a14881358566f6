"""Lambda handler sources, embedded into templates at synth time."""
