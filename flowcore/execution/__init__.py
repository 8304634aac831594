"""Running a checked workflow: the plan and runtime, the operators (implemented once in _standalone_ops),
the sandbox for generated code, the compiler to a standalone module, and Ray for the fan-out."""
