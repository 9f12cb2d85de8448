"""Hand a plan to a training engine: the chosen layout, batch, precision, recomputation and
model shape written as a torchtitan job config (TOML), Megatron-LM arguments or a DeepSpeed
config (JSON). Each engine's mapping is a table of typed rows, one per option it emits, with
the engine's version and the source file that defines the option. A plan feature an engine has
no equivalent for is refused with one line naming the feature and the engine; nothing is
emitted that the engine would read differently from the plan. Imports: core."""
