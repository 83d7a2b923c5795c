"""Checkpoint files on their own: exact round trip of odd leaves, layout refusal, finished-only lookup."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdqn import checkpoint


class State(NamedTuple):
    weights: jax.Array
    empty: jax.Array  # zero-size: orbax refuses these, so they are not stored
    counter: jax.Array
    key: jax.Array  # a typed PRNG key


def make_state(seed: int) -> State:
    rng = np.random.default_rng(seed)
    return State(weights=jnp.asarray(rng.normal(size=(3, 5)), jnp.float32), empty=jnp.zeros((0, 4), jnp.float32),
                 counter=jnp.int32(seed), key=jax.random.key(seed))


def test_round_trip_is_exact_for_every_leaf_kind(tmp_path):
    state = make_state(7)
    path = checkpoint.save(tmp_path, 12, state, {"note": "x"})
    assert path.name == "checkpoint_000012"
    restored, meta = checkpoint.restore(tmp_path, jax.eval_shape(lambda: make_state(0)))
    assert meta["note"] == "x"
    np.testing.assert_array_equal(restored.weights, state.weights)
    assert restored.empty.shape == (0, 4) and restored.counter.dtype == jnp.int32 and int(restored.counter) == 7
    np.testing.assert_array_equal(jax.random.key_data(restored.key), jax.random.key_data(state.key))
    np.testing.assert_array_equal(jax.random.uniform(restored.key, (3,)), jax.random.uniform(state.key, (3,)))


def test_another_layout_is_refused_with_the_first_difference(tmp_path):
    checkpoint.save(tmp_path, 1, make_state(1), {})
    other = make_state(1)._replace(weights=jnp.zeros((3, 6), jnp.float32))
    with pytest.raises(ValueError, match=r"another state layout.*\[3, 5\].*\[3, 6\]"):
        checkpoint.restore(tmp_path, other)


def test_only_finished_checkpoints_are_found(tmp_path):
    assert checkpoint.finished(tmp_path) == []
    checkpoint.save(tmp_path, 2, make_state(2), {})
    checkpoint.save(tmp_path, 10, make_state(3), {})
    (tmp_path / "checkpoint_000011.orbax-checkpoint-tmp-123").mkdir()  # an interrupted save
    assert [p.name for p in checkpoint.finished(tmp_path)] == ["checkpoint_000002", "checkpoint_000010"]
    assert checkpoint.resolve(tmp_path).name == "checkpoint_000010"
    restored, _ = checkpoint.restore(tmp_path / "checkpoint_000002", make_state(0))
    assert int(restored.counter) == 2


def test_keys_keep_their_prng_and_another_prng_is_refused(tmp_path):
    philox = make_state(3)._replace(key=jax.random.key(3, impl="philox4x32"))
    checkpoint.save(tmp_path, 1, philox, {})
    template = jax.eval_shape(lambda: philox)
    restored, _ = checkpoint.restore(tmp_path, template)
    assert str(jax.random.key_impl(restored.key)) == "philox4x32"
    np.testing.assert_array_equal(jax.random.uniform(restored.key, (3,)), jax.random.uniform(philox.key, (3,)))
    # Same uint32[2] key data, another generator: refused, not silently reinterpreted.
    with pytest.raises(ValueError, match=r"holds a philox4x32 key at .*key.*draws from threefry2x32"):
        checkpoint.restore(tmp_path, jax.eval_shape(lambda: make_state(0)))


def largest_file(path):
    return max((p for p in path.rglob("*") if p.is_file() and p.name != checkpoint.MANIFEST),
               key=lambda p: p.stat().st_size)


def test_changed_bytes_are_refused_naming_the_file_and_a_run_folder_falls_back(tmp_path):
    checkpoint.save(tmp_path, 1, make_state(1), {})
    newest = checkpoint.save(tmp_path, 2, make_state(2), {})
    damaged = largest_file(newest / "state")
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2: len(data) // 2 + 64] = np.random.default_rng(0).integers(0, 256, 64, dtype=np.uint8).tobytes()
    damaged.write_bytes(bytes(data))
    with pytest.raises(checkpoint.DamagedCheckpoint, match=f"{damaged.relative_to(newest)} does not match its checksum"):
        checkpoint.restore(newest, make_state(0))
    with pytest.warns(UserWarning, match="checkpoint_000002.*damaged.*using checkpoint_000001"):
        assert checkpoint.resolve(tmp_path).name == "checkpoint_000001"
    found, passed_over = checkpoint.newest_intact(tmp_path)
    assert found.name == "checkpoint_000001" and len(passed_over) == 1
    restored, _ = checkpoint.restore(found, make_state(0))
    assert int(restored.counter) == 1


def test_truncated_metadata_and_missing_manifest_are_named(tmp_path):
    path = checkpoint.save(tmp_path, 3, make_state(3), {"note": "x"})
    meta_file = path / "meta" / "metadata"
    meta_file.write_bytes(meta_file.read_bytes()[:5])
    with pytest.raises(checkpoint.DamagedCheckpoint, match=r"meta/metadata has 5 bytes, \d+ were written"):
        checkpoint.read_meta(path)
    with pytest.raises(checkpoint.DamagedCheckpoint, match="no intact checkpoint"):
        checkpoint.resolve(tmp_path)
    other = checkpoint.save(tmp_path / "b", 1, make_state(1), {})
    (other / checkpoint.MANIFEST).unlink()  # a save killed before its manifest: not finished
    with pytest.raises(checkpoint.DamagedCheckpoint, match="no manifest.json"):
        checkpoint.read_meta(other)


def test_a_failed_save_is_one_error_naming_the_path_and_keeps_the_last_checkpoint(tmp_path, capfd):
    resource = pytest.importorskip("resource")
    import signal

    noise = np.random.default_rng(4).normal(size=(300, 1000)).astype(np.float32)  # 1.2 MB, incompressible
    state = make_state(4)._replace(weights=jnp.asarray(noise))
    checkpoint.save(tmp_path, 1, state, {})
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))  # a full disk, as the file size limit
    try:
        capfd.readouterr()
        with pytest.raises(checkpoint.SaveError, match=r"checkpoint_000002.*File too large.*earlier checkpoints"):
            checkpoint.save(tmp_path, 2, state, {}, keep=1)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert "Traceback" not in capfd.readouterr().err  # orbax's threads' tracebacks are not printed
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_000001"]  # no partial folder left
    restored, _ = checkpoint.restore(tmp_path, make_state(0)._replace(weights=jnp.zeros((300, 1000))))
    np.testing.assert_array_equal(restored.weights, noise)


@pytest.mark.parametrize("keep", [0, -1, 1.5, True])
def test_keep_must_be_a_positive_count(tmp_path, keep):
    with pytest.raises(ValueError, match=f"keep={keep!r} is invalid"):
        checkpoint.save(tmp_path, 1, make_state(1), {}, keep=keep)
