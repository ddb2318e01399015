"""python -m trainer.task with one pause at an exact moment, so that a test can race or interrupt
the real command deterministically instead of hoping a sleep lands in the right place.

    .venv/bin/python -m tests.trainer.paused_task after_checkpoint:75 --output_dir OUT ...
    .venv/bin/python -m tests.trainer.paused_task until_deleted:eval_pass:FLAG --mode continuous_eval ...

after_checkpoint:STEP[:FLAG]  once the checkpoint of STEP is written (either engine), the process
                        sleeps until it is killed (a SIGKILL then lands between that checkpoint
                        and the next step, however fast the steps are), or until the file FLAG
                        exists.
until_deleted:MOMENT[:FLAG]  the first checkpoint (past step 0) an evaluation reaches at MOMENT is
                        waited on until it is gone (a trainer's keep_checkpoint_max deletes it),
                        then the evaluation goes on; FLAG is written when the wait starts (a
                        trainer paused with after_checkpoint:STEP:FLAG then trains on, so the
                        checkpoint held is always one it will delete). MOMENT: evaluation_start (either engine),
                        keras_restore (between reading the checkpoint's variable list and their
                        values), eval_pass (after the Keras engine's restore, before it reads
                        the step: where the crash of issue 33 was), export (a new best's export).

Each pause prints one line to stderr starting with MARK, so the test sees that it happened.
"""
import os
import sys
import time

MARK = "paused_task:"
WAIT_SECS = 180  # longer than any trainer of the tests takes to write two more checkpoints


def say(text):
    print(f"{MARK} {text}", file=sys.stderr, flush=True)


def pause_after_checkpoint(step, flag=None):
    """Wraps both engines' checkpoint writers: after the one of `step`, sleep until killed (or
    until the file flag exists)."""
    import tensorflow as tf

    def wrap(save):
        def saving(*args, **kwargs):
            path = save(*args, **kwargs)
            if str(path).endswith(f"model.ckpt-{step}"):
                say(f"checkpoint {step} written; sleeping until {flag or 'killed'}")
                deadline = time.monotonic() + (WAIT_SECS if flag else 3600)
                while not (flag and os.path.exists(flag)) and time.monotonic() < deadline:
                    time.sleep(0.05)
            return path
        return saving
    tf.train.CheckpointManager.save = wrap(tf.train.CheckpointManager.save)  # the Keras engine
    tf.compat.v1.train.Saver.save = wrap(tf.compat.v1.train.Saver.save)  # the Estimator's hook


def wait_until_deleted(prefix, moment, flag):
    say(f"{os.path.basename(prefix)} reached {moment}; waiting until it is deleted")
    if flag:
        open(flag, "w").close()
    deadline = time.monotonic() + WAIT_SECS
    while os.path.exists(prefix + ".index") and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = not os.path.exists(prefix + ".index")
    say(f"{os.path.basename(prefix)} {'deleted' if gone else 'NOT deleted'} at {moment}; going on")


def pause_until_deleted(moment, flag=None):
    """Patches the function called at `moment` (looked up by its module at each call)."""
    from trainer.run import checkpoints, evaluations, variable_names
    state = {"current": None, "paused": False}

    def once(prefix):
        if not state["paused"] and prefix and checkpoints.CHECKPOINT_INDEX.match(
                os.path.basename(prefix) + ".index") and not prefix.endswith("-0"):
            state["paused"] = True
            wait_until_deleted(prefix, moment, flag)

    def patch(module, name, before=None, after=None):
        original = getattr(module, name)

        def patched(*args, **kwargs):
            if before:
                before(*args)
            result = original(*args, **kwargs)
            if after:
                after(*args)
            return result
        setattr(module, name, patched)

    def remember(engine, params, checkpoint_path, step):
        state["current"] = checkpoint_path
        if moment == "evaluation_start":
            once(checkpoint_path)
    patch(evaluations, "evaluate", before=remember)
    if moment == "keras_restore":
        patch(variable_names, "variables_by_name", after=lambda prefix: once(prefix))
    elif moment == "eval_pass":
        from trainer.keras import evaluate
        patch(evaluate, "run_eval_pass", before=lambda *args: once(state["current"]))
    elif moment == "export":
        patch(evaluations, "export_model", before=lambda engine, params, prefix, *rest: once(prefix))


def main():
    what, value, *flag = sys.argv[1].split(":", 2)
    sys.argv = ["trainer.task", *sys.argv[2:]]
    from trainer import task  # first: it quiets TensorFlow before TensorFlow loads
    if what == "after_checkpoint":
        pause_after_checkpoint(int(value), *flag)
    else:
        pause_until_deleted(value, *flag)
    task.main()


if __name__ == "__main__":
    main()
