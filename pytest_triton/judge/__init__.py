"""Can the verdict be trusted: every known way a kernel fakes its correctness or its speed,
checked (the cheap checks always, the costly ones under --triton-judge; docs/judging.md)."""
