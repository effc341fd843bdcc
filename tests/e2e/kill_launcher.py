"""Test-only: float32_launcher.py (`spec-compat run` with the engine in float32) that can
SIGKILL its own process group at an exact moment of the data script's run, so the kill
test does not depend on wall time.  The script itself runs unchanged.

SPEC_COMPAT_TEST_KILL:
  `save:N`  the writer thread saving data_N.pt writes half its bytes, then the group dies
            (the other writer threads are wherever they are: some files cut, some absent);
  `config`  when the script builds data_config.json: every data file written (and 0.4.x's
            sample_lengths.json), the config never.
SPEC_COMPAT_TEST_KILL_ONCE=FILE: only the first process to get there dies (it creates FILE);
a rerun or a retried replica goes through.
The group: the test starts this launcher in a session of its own, so vLLM's workers die
with it, as under a job scheduler's or the OOM killer's SIGKILL (the replicas driver starts
each chunk's script in a session of its own too; `datagen_upstream_script.py` imports this
module for its hooks, since the driver runs it under plain `spec-compat run`).
"""

import io
import os
import signal
import sys
from pathlib import Path

import float32_launcher  # noqa: F401  (registers the float32 engine hook)
import wrapt

KILL = os.environ.get("SPEC_COMPAT_TEST_KILL", "")
ONCE = os.environ.get("SPEC_COMPAT_TEST_KILL_ONCE", "")


def due() -> bool:
    """Whether the kill fires here: always, or with ONCE only where FILE did not exist."""
    if not ONCE:
        return True
    try:
        os.close(os.open(ONCE, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def die() -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


if KILL.startswith("save:"):
    victim = f"data_{KILL.split(':')[1]}.pt"

    @wrapt.when_imported("torch")
    def _kill_in_save(torch):
        original_save = torch.save

        def save(obj, f, *args, **kwargs):
            if isinstance(f, str | os.PathLike) and Path(f).name == victim and due():
                buffer = io.BytesIO()
                original_save(obj, buffer, *args, **kwargs)
                with open(f, "wb") as handle:
                    handle.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
                    handle.flush()
                    os.fsync(handle.fileno())
                die()
            return original_save(obj, f, *args, **kwargs)

        torch.save = save

elif KILL == "config":

    @wrapt.when_imported("speculators.data_generation.config_generator")
    def _kill_at_config(module):
        def from_generator(wrapped, instance, args, kwargs):
            if due():
                die()
            return wrapped(*args, **kwargs)

        wrapt.wrap_function_wrapper(module, "DataGenerationConfig.from_generator", from_generator)


if __name__ == "__main__":
    from spec_compat.__main__ import main

    sys.exit(main(["run", *sys.argv[1:]]))
