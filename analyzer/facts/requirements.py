"""What a rule may declare it `requires` (pure data, no imports: `perfsleuth rules` reads it without
loading the facts' providers, numpy or pandas). `facts.core` re-exports it."""

# What a rule may declare it `requires` (rules/*.toml): name -> (the bool fact that says the trace has
# it, why the rule could not be checked without it). A rule that requires something the trace lacks and
# that applies to the trace is listed as not checked (docs/rules.md), never skipped silently.
REQUIREMENTS = {
    "device_generation": ("device_generation_known", "device generation unknown (no deviceProperties, and no "
                          "architecture in the device name or the kernel names)"),
    "run_metadata": ("has_run_metadata", "cores, threads and DataLoader workers unknown (recorded only by "
                     "`perfsleuth run` or `perfsleuth.profile()`)"),
    "stacks": ("has_stacks", "no Python stacks (record with with_stack=True)"),
    "shapes": ("has_shapes", "no input shapes or types (record with record_shapes=True)"),
}
