"""Triton's interpreter (TRITON_INTERPRET=1), the CPU path: whether it runs (base), its known gaps
(gaps), the fixes that let real kernel libraries run under it (fixes, and the modules of each
fix), program orders (program_order), and the interpreter as a pytest feature (feature)."""
