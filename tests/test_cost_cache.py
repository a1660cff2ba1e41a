"""The operator profile cache: keys, the file format, bad files, concurrent saves,
merging, and where the files live."""

import json
import multiprocessing
import random
import sys
import zlib

import msgpack
import pytest

from flextui.cost.cache import (
    PROFILES,
    BadDocument,
    ProfileCache,
    ProfileEntry,
    ProfileKey,
    UpdateEntry,
    UpdateKey,
    decode_cache,
    device_kind_slug,
    encode_cache,
    merge_cache_files,
)
from flextui.cost.cache_dirs import reference_profile_dir, user_profile_dir
from flextui.cost.optimizers import OptimizerKind
from flextui.errors import FlextuiError
from flextui.graph import GraphBuilder
from helpers import HANG_S

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
H100_FILE = "nvidia-h100-80gb-hbm3.msgpack"


def key(tag: str = "a", training: bool = True, device: str = H100, **attrs) -> ProfileKey:
    return ProfileKey("linear", {"tag": tag, **attrs}, [(32, 64)], [(16, 64), (16,)], [(32, 16)],
                      "float32", training, device, "2.4.0")


def entry(forward_s: float = 1e-3, training: bool = True, at: float = 1000.0) -> ProfileEntry:
    return ProfileEntry(forward_s, 2 * forward_s if training else None, forward_s / 10,
                        forward_s / 5 if training else None, repeats=20,
                        peak_memory_bytes=1 << 20, measured_at=at)


def entries(*pairs) -> dict:
    return {k.encoded: e for k, e in pairs}


def reseal(doc: dict) -> bytes:
    """Pack a hand-edited file map with a valid checksum, as flextui writes it."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    return msgpack.packb({**body, "checksum": zlib.crc32(msgpack.packb(body, use_bin_type=True))},
                         use_bin_type=True)


def update(nbytes: int = 8192, device: str = H100,
           optimizer: OptimizerKind = OptimizerKind.SGD) -> UpdateKey:
    return UpdateKey(nbytes, "float32", device, "2.4.0", optimizer)


def good_file() -> bytes:
    return encode_cache(H100, entries((key("a"), entry()), (key("b", training=False),
                                                            entry(training=False))),
                        {update(): UpdateEntry(1e-5, 1e-7, 10, 1000.0)})


def version_1_file(update_params=((2048,),)) -> bytes:
    """A cache as version 1 wrote it: the update of an 8 KiB float32 shard as a task of
    op type ``sgd-momentum-update`` (its shard the one parameter, in elements)."""
    fake = ProfileKey("sgd-momentum-update", (), (), update_params, (), "float32", True,
                      H100, "2.4.0")
    timed = ProfileEntry(1e-5, 0.0, 1e-7, 0.0, repeats=10, peak_memory_bytes=3 * 8192,
                         measured_at=1000.0)
    doc = msgpack.unpackb(encode_cache(H100, entries((key("a"), entry()), (fake, timed))))
    del doc["updates"]
    return reseal({**doc, "version": 1})


# ---- keys and entries ---------------------------------------------------------------

def test_key_canonicalisation_ignores_attr_order_and_tuple_vs_list():
    one = ProfileKey("conv2d", {"stride": (1, 1), "kernel": [3, 3], "groups": 1},
                     [(8, 3, 32, 32)], [(16, 3, 3, 3)], [(8, 16, 30, 30)],
                     "bfloat16", True, H100, "2.4.0")
    two = ProfileKey("conv2d", {"groups": 1, "kernel": (3, 3), "stride": [1, 1]},
                     [[8, 3, 32, 32]], [[16, 3, 3, 3]], [[8, 16, 30, 30]],
                     "bfloat16", True, H100, "2.4.0")
    assert one == two and one.encoded == two.encoded and hash(one) == hash(two)
    assert one.to_map()["attrs"] == {"groups": 1, "kernel": [3, 3], "stride": [1, 1]}
    assert ProfileKey.from_map(msgpack.unpackb(msgpack.packb(one.to_map()))) == one
    assert key(stride=2).encoded != key(stride=3).encoded
    assert key(training=True).encoded != key(training=False).encoded
    assert key(flag=True).encoded != key(flag=1).encoded   # msgpack tells bools from ints


def test_key_for_task_takes_the_block_shapes_of_the_op():
    g = GraphBuilder("t")
    g.linear(g.input((64, 32), name="x"), 16, name="fc")
    op = g.build().op("fc")
    k = ProfileKey.for_task(op, ((0, 32), (0, 8)), "float16", False, H100, "2.4.0")
    assert k.op_type == "linear" and dict(k.attrs) == {"out_features": 16, "bias": True}
    assert k.input_shapes == ((32, 32),)
    assert k.param_shapes == ((8, 32), (8,))
    assert k.output_shapes == ((32, 8),)
    assert k.device_kind == "nvidia-h100-80gb-hbm3"


@pytest.mark.parametrize("name", ["inception_v3", "nmt", "transformer", "dlrm"])
def test_a_key_for_a_task_is_the_key_built_field_by_field(name):
    """for_task takes an op's attributes and shapes as they are: the key must be the
    one the validating constructor makes, bytes and all."""
    from flextui.graph.library import load_model
    from flextui.strategy.enumerate import degree_choices
    graph = load_model(name, batch_size=8)
    for op in graph.ops:
        for degrees in degree_choices(op, 4):
            region = tuple((0, d.size // n) for n, d in zip(degrees, op.space))
            fast = ProfileKey.for_task(op, region, "bfloat16", True, H100, "2.4.0")
            slow = ProfileKey(fast.op_type, op.attrs, fast.input_shapes, fast.param_shapes,
                              fast.output_shapes, "bfloat16", True, H100, "2.4.0")
            assert fast == slow and fast.encoded == slow.encoded
            assert ProfileKey.from_encoded(fast.encoded) == fast
    with pytest.raises(ValueError, match="dtype"):
        ProfileKey.for_task(graph.ops[1], tuple((0, d.size) for d in graph.ops[1].space),
                            "float64", True, H100, "2.4.0")


@pytest.mark.parametrize("change", [{"dtype": "float64"}, {"training": 1}, {"op_type": ""},
                                    {"input_shapes": [(2, -1)]}, {"attrs": {"f": object()}},
                                    {"attrs": {"nan": float("nan")}}])
def test_bad_keys_are_rejected(change):
    fields = dict(op_type="relu", attrs={}, input_shapes=[(4,)], param_shapes=[],
                  output_shapes=[(4,)], dtype="float32", training=False, device_name=H100,
                  torch_version="2.4.0")
    with pytest.raises(ValueError):
        ProfileKey(**{**fields, **change})


def test_entries_are_validated():
    assert ProfileEntry(None, None, oom=True).oom
    for bad in (dict(forward_s=-1.0, backward_s=None),
                dict(forward_s=1.0, backward_s=None, oom=True),
                dict(forward_s=None, backward_s=None),
                dict(forward_s=1.0, backward_s=None, repeats=-1),
                dict(forward_s=float("inf"), backward_s=None),
                dict(forward_s=1.0, backward_s=None, backward_spread_s=0.1)):
        with pytest.raises(ValueError):
            ProfileEntry(**bad)


def test_device_kind_slug():
    assert device_kind_slug(H100) == "nvidia-h100-80gb-hbm3"
    assert device_kind_slug("CPU AMD EPYC 7B13") == "cpu-amd-epyc-7b13"
    assert device_kind_slug("Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz") == \
        "intel-xeon-gold-6338-cpu-2-00ghz"
    assert device_kind_slug("../..") == "unknown-device"


# ---- the cache ----------------------------------------------------------------------

def test_round_trip(tmp_path):
    cache = ProfileCache(H100, [tmp_path])
    oom_key = key("big")
    cache.put(key("a"), entry(1e-3))
    cache.put(key("b", training=False), entry(2e-3, training=False))
    cache.put(oom_key, ProfileEntry(None, None, oom=True, peak_memory_bytes=80 << 30,
                                    measured_at=5.0))
    assert cache.save() == 3
    doc = msgpack.unpackb((tmp_path / H100_FILE).read_bytes())
    assert (doc["format"], doc["version"], doc["device"], doc["device_kind"]) == \
        ("flextui-profiles", 3, H100, "nvidia-h100-80gb-hbm3")
    again = ProfileCache(H100, [tmp_path])
    assert again.get(key("a")) == entry(1e-3)
    assert again.get(key("b", training=False)) == entry(2e-3, training=False)
    assert again.get(oom_key).oom and again.get(oom_key).forward_s is None
    assert again.notices == []


def test_updates_are_records_of_their_own_and_the_newer_measurement_wins(tmp_path):
    cache = ProfileCache(H100, [tmp_path])
    cache.put(key("a"), entry())
    cache.put_update(update(4096), UpdateEntry(1e-6, measured_at=5.0))
    cache.put_update(update(8192), UpdateEntry(3e-6, measured_at=5.0))
    assert cache.save() == 1
    other = ProfileCache(H100, [tmp_path])
    other.put_update(update(8192), UpdateEntry(2e-6, measured_at=9.0))
    other.save()
    saved = decode_cache((tmp_path / H100_FILE).read_bytes(), "nvidia-h100-80gb-hbm3")
    assert saved.entries.keys() == {key("a").encoded}
    assert saved.updates == {update(4096): UpdateEntry(1e-6, measured_at=5.0),
                             update(8192): UpdateEntry(2e-6, measured_at=9.0)}
    assert ProfileCache(H100, [tmp_path]).get_update(update(8192)).seconds == 2e-6
    assert ProfileCache(H100, [tmp_path]).get_update(update(2048)) is None


def test_a_version_1_file_reads_its_updates_as_updates_and_is_saved_as_version_3(tmp_path):
    path, old = tmp_path / H100_FILE, version_1_file()
    path.write_bytes(old)
    cache = ProfileCache(H100, [tmp_path])
    assert cache.notices == [] and cache.get(key("a")) == entry()
    assert cache.get_update(update()) == UpdateEntry(1e-5, 1e-7, 10, 1000.0)
    assert path.read_bytes() == old                     # read, not rewritten
    cache.put(key("b"), entry())
    assert cache.save() == 2                            # the tasks: a and b, no update
    saved = msgpack.unpackb(path.read_bytes())
    assert saved["version"] == 3 and len(saved["updates"]) == 1
    assert all(b"sgd-momentum-update" not in code for code, _ in saved["entries"])
    assert decode_cache(path.read_bytes()).updates == {update(): cache.get_update(update())}
    assert list(tmp_path.glob("*.corrupt-*")) == []


def test_a_version_2_file_holds_sgd_updates_and_is_saved_as_version_3(tmp_path):
    """Version 2's update keys named no optimizer: it timed SGD alone."""
    path = tmp_path / H100_FILE
    doc = msgpack.unpackb(good_file())
    [[stored_key, stored]] = doc["updates"]
    assert stored_key.pop("optimizer") == "sgd"
    path.write_bytes(reseal({**doc, "version": 2}))
    cache = ProfileCache(H100, [tmp_path])
    assert cache.notices == []
    assert cache.get_update(update()) == UpdateEntry(1e-5, 1e-7, 10, 1000.0)
    assert cache.get_update(update(optimizer=OptimizerKind.ADAMW)) is None
    cache.put_update(update(optimizer=OptimizerKind.ADAMW), UpdateEntry(3e-5, measured_at=5.0))
    cache.save()
    saved = msgpack.unpackb(path.read_bytes())
    assert saved["version"] == 3
    assert sorted(k["optimizer"] for k, _ in saved["updates"]) == ["adamw", "sgd"]
    # a version 2 key that names an optimizer is one version 2 never wrote
    path.write_bytes(reseal({**msgpack.unpackb(good_file()), "version": 2}))
    notice, = ProfileCache(H100, [tmp_path]).notices
    assert "update 0" in notice and "optimizer" in notice


def test_a_version_1_reference_file_is_read_as_it_is(tmp_path):
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / H100_FILE).write_bytes(version_1_file())
    cache = ProfileCache(H100, [tmp_path / "user", tmp_path / "ref"])
    assert cache.notices == [] and cache.get_update(update()).seconds == 1e-5
    assert cache.get(key("a")) == entry()
    assert [k for k, _ in decode_cache(version_1_file()).items()] == [key("a")]


def test_hits_and_misses(tmp_path):
    cache = ProfileCache(H100, [tmp_path])
    assert cache.get(key("a")) is None
    cache.put(key("a"), entry())
    assert cache.get(key("a")) == entry() and cache.get(key("b")) is None
    assert (cache.hits, cache.misses) == (1, 2)


def test_put_rejects_another_device_or_a_mismatched_entry(tmp_path):
    cache = ProfileCache(H100, [tmp_path])
    with pytest.raises(ValueError):
        cache.put(key("a", device=A100), entry())
    with pytest.raises(ValueError):
        cache.put(key("a", training=False), entry(training=True))


def test_reference_dir_is_a_fallback_and_the_user_entry_shadows_it(tmp_path):
    user, ref = tmp_path / "user", tmp_path / "ref"
    ref.mkdir()
    (ref / H100_FILE).write_bytes(encode_cache(H100, entries((key("a"), entry(1.0)),
                                                             (key("r"), entry(3.0)))))
    before = (ref / H100_FILE).read_bytes()
    cache = ProfileCache(H100, [user, ref])
    assert cache.get(key("r")) == entry(3.0) and cache.get(key("a")) == entry(1.0)
    cache.put(key("a"), entry(2.0))
    cache.save()
    assert ProfileCache(H100, [user, ref]).get(key("a")) == entry(2.0)
    assert (ref / H100_FILE).read_bytes() == before
    assert decode_cache((user / H100_FILE).read_bytes()).entries.keys() == {key("a").encoded}


def test_save_keeps_the_newer_measurement_of_each_key(tmp_path):
    old, new = ProfileCache(H100, [tmp_path]), ProfileCache(H100, [tmp_path])
    new.put(key("a"), entry(2.0, at=200.0))
    new.save()
    old.put(key("a"), entry(1.0, at=100.0))
    old.put(key("b"), entry(1.0, at=100.0))
    assert old.save() == 2
    again = ProfileCache(H100, [tmp_path])
    assert again.get(key("a")) == entry(2.0, at=200.0) and again.get(key("b")) is not None


def _save_many(directory: str, tag: str, barrier) -> None:
    cache = ProfileCache(H100, [directory])
    barrier.wait()
    for r in range(5):
        for i in range(10):
            cache.put(key(f"{tag}-{r}-{i}"), entry())
        cache.save()


def test_concurrent_saves_from_two_processes_keep_both_sets_of_entries(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_save_many, args=(str(tmp_path), tag, barrier)) for tag in "xy"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(HANG_S)
    assert [p.exitcode for p in procs] == [0, 0]
    cache = ProfileCache(H100, [tmp_path])
    assert len(decode_cache((tmp_path / H100_FILE).read_bytes()).entries) == 100
    assert all(cache.get(key(f"{t}-{r}-{i}")) for t in "xy" for r in range(5) for i in range(10))


# ---- bad files ----------------------------------------------------------------------

def _wrong_field_type() -> bytes:
    doc = msgpack.unpackb(good_file())
    doc["entries"][0][1]["forward_s"] = "fast"
    return reseal(doc)


def _bad_update(**change) -> bytes:
    doc = msgpack.unpackb(good_file())
    pair = doc["updates"][0]
    pair[0 if set(change) <= set(update().to_map()) else 1].update(change)
    return reseal(doc)


def _bit_flipped() -> bytes:
    data = bytearray(good_file())
    data[len(data) // 2] ^= 0x04
    return bytes(data)


BAD_FILES = {
    "empty": (lambda: b"", "empty"),
    "truncated": (lambda: good_file()[:-40], "truncated"),
    "bit-flipped": (_bit_flipped, "corrupt"),
    "random bytes": (lambda: random.Random(7).randbytes(600), "not a flextui profile cache"),
    "json": (lambda: json.dumps({"format": "flextui-profiles", "entries": []}).encode(),
             "not a flextui profile cache"),
    "msgpack list": (lambda: msgpack.packb([1, 2, 3]), "not a flextui profile cache"),
    "wrong field type": (_wrong_field_type, "entry 0: forward_s"),
    "version is a string": (lambda: reseal({**msgpack.unpackb(good_file()), "version": "1"}),
                            "version"),
    "another device kind": (lambda: encode_cache(A100, entries((key("a", device=A100), entry()))),
                            "device kind 'nvidia-a100-sxm4-80gb'"),
    "an update of another device": (lambda: _bad_update(device_name=A100),
                                    "update 0: device 'NVIDIA A100-SXM4-80GB' is not of kind"),
    "an update of no time": (lambda: _bad_update(seconds=-1.0), "update 0: seconds"),
    "an update of no shard": (lambda: _bad_update(shard_bytes=0), "update 0: shard_bytes"),
    "an update with a field more": (lambda: _bad_update(op_type="x"), "update 0"),
    "an update of another optimizer": (lambda: _bad_update(optimizer="lamb"),
                                       "update 0: optimizer"),
    "no updates": (lambda: reseal({k: v for k, v in msgpack.unpackb(good_file()).items()
                                   if k != "updates"}), "updates"),
    "version 1 with updates": (lambda: reseal({**msgpack.unpackb(good_file()), "version": 1}),
                               "updates"),
    "a version 1 update of no shard": (lambda: version_1_file(()), "sgd-momentum-update"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_a_bad_user_file_is_reported_moved_aside_and_rebuilt(tmp_path, case):
    make, phrase = BAD_FILES[case]
    data, path = make(), tmp_path / H100_FILE
    path.write_bytes(data)
    cache = ProfileCache(H100, [tmp_path])
    notice, = cache.notices
    assert "\n" not in notice and notice.startswith(f"{path}: ") and phrase in notice
    assert notice.endswith("it will be rebuilt")
    aside, = tmp_path.glob(f"{H100_FILE}.corrupt-*")
    assert aside.read_bytes() == data and f"moved aside to {aside}" in notice
    assert not path.exists() and cache.get(key("a")) is None
    cache.put(key("a"), entry())
    assert cache.save() == 1
    assert ProfileCache(H100, [tmp_path]).get(key("a")) == entry()
    assert aside.read_bytes() == data   # never deleted


@pytest.mark.parametrize("case", BAD_FILES)
def test_a_bad_reference_file_is_reported_and_ignored(tmp_path, case):
    make, phrase = BAD_FILES[case]
    user, ref = tmp_path / "user", tmp_path / "ref"
    ref.mkdir()
    data = make()
    (ref / H100_FILE).write_bytes(data)
    cache = ProfileCache(H100, [user, ref])
    notice, = cache.notices
    assert "\n" not in notice and str(ref / H100_FILE) in notice and phrase in notice
    assert "ignored" in notice
    assert (ref / H100_FILE).read_bytes() == data and len(list(ref.iterdir())) == 1
    assert cache.get(key("a")) is None


def test_every_single_bit_flip_is_detected():
    data = good_file()
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(BadDocument):
            decode_cache(bytes(flipped), "nvidia-h100-80gb-hbm3")


def newer_file() -> bytes:
    return reseal({**msgpack.unpackb(good_file()), "version": PROFILES.version + 1,
                   "something_new": [1]})


def test_a_newer_user_file_is_left_untouched_and_save_refuses(tmp_path):
    path = tmp_path / H100_FILE
    path.write_bytes(newer_file())
    cache = ProfileCache(H100, [tmp_path])
    notice, = cache.notices
    assert "\n" not in notice and str(path) in notice
    assert "newer flextui" in notice and "upgrade flextui" in notice
    assert cache.get(key("a")) is None
    cache.put(key("a"), entry())
    with pytest.raises(FlextuiError, match="newer flextui"):
        cache.save()
    assert path.read_bytes() == newer_file() and list(tmp_path.glob("*.corrupt-*")) == []


def test_a_newer_reference_file_is_ignored(tmp_path):
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / H100_FILE).write_bytes(newer_file())
    cache = ProfileCache(H100, [tmp_path / "user", tmp_path / "ref"])
    notice, = cache.notices
    assert "upgrade flextui" in notice and "ignored" in notice


# ---- merging ------------------------------------------------------------------------

def test_merge_two_machines_files(tmp_path):
    a, b, out = tmp_path / "a.msgpack", tmp_path / "b.msgpack", tmp_path / "out" / H100_FILE
    a.write_bytes(encode_cache(H100, entries((key("a"), entry(1.0, at=1.0)),
                                             (key("both"), entry(1.0, at=1.0))),
                               {update(): UpdateEntry(1.0, measured_at=1.0),
                                update(4096): UpdateEntry(1.0, measured_at=1.0)}))
    b.write_bytes(encode_cache(H100, entries((key("b"), entry(2.0, at=2.0)),
                                             (key("both"), entry(2.0, at=2.0))),
                               {update(): UpdateEntry(2.0, measured_at=2.0)}))
    assert merge_cache_files(a, b, out) == 3
    cache = ProfileCache(H100, [out.parent])
    assert cache.get(key("both")) == entry(2.0, at=2.0) and cache.get(key("a")) is not None
    assert (cache.get_update(update()).seconds, cache.get_update(update(4096)).seconds) == \
        (2.0, 1.0)
    # an existing output of the same kind is merged in, not clobbered
    out.write_bytes(encode_cache(H100, entries((key("c"), entry()))))
    assert merge_cache_files(a, b, out) == 4


def test_merge_refuses_different_kinds_and_bad_files(tmp_path):
    a, b, bad = tmp_path / "a.msgpack", tmp_path / "b.msgpack", tmp_path / "bad.msgpack"
    a.write_bytes(good_file())
    b.write_bytes(encode_cache(A100, entries((key("a", device=A100), entry()))))
    bad.write_bytes(good_file()[:-10])
    with pytest.raises(FlextuiError, match="different device kinds"):
        merge_cache_files(a, b, tmp_path / "out.msgpack")
    with pytest.raises(FlextuiError, match="bad.msgpack: corrupt or truncated"):
        merge_cache_files(a, bad, tmp_path / "out.msgpack")
    with pytest.raises(FlextuiError, match="cannot be read"):
        merge_cache_files(a, tmp_path / "missing.msgpack", tmp_path / "out.msgpack")
    assert not (tmp_path / "out.msgpack").exists() and bad.read_bytes() == good_file()[:-10]


# ---- directories --------------------------------------------------------------------

@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    monkeypatch.delenv("FLEXTUI_PROFILES", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "platform", "linux")
    return monkeypatch


def test_user_profile_dir_resolution_order(clean_env, tmp_path):
    home = tmp_path / "home"
    assert user_profile_dir(None) == home / ".cache" / "flextui" / "profiles"
    clean_env.setattr(sys, "platform", "darwin")
    assert user_profile_dir(None) == home / "Library" / "Caches" / "flextui" / "profiles"
    clean_env.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert user_profile_dir(None) == home / "Library" / "Caches" / "flextui" / "profiles"
    clean_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_profile_dir(None) == tmp_path / "xdg" / "flextui" / "profiles"
    clean_env.setenv("FLEXTUI_PROFILES", str(tmp_path / "env"))
    assert user_profile_dir(None) == tmp_path / "env"
    assert user_profile_dir(str(tmp_path / "explicit")) == tmp_path / "explicit"
    assert user_profile_dir("~/p") == home / "p"


def test_reference_dir_is_the_shipped_profiles_package(clean_env, tmp_path):
    ref = reference_profile_dir()
    assert (ref / "__init__.py").is_file()   # README.md is not package data
    clean_env.setenv("FLEXTUI_PROFILES", str(tmp_path / "mine"))
    cache = ProfileCache.open_default(H100)
    assert cache.path == tmp_path / "mine" / H100_FILE
    assert cache.reference_paths == [ref / H100_FILE]
    assert ProfileCache.open_default(H100, tmp_path / "x").path.parent == tmp_path / "x"


def test_keys_are_decoded_only_where_they_are_read_as_keys():
    doc = msgpack.unpackb(good_file())
    doc["entries"][0][0] = b"\x81\xa3not a key"          # sealed, but no key
    data = decode_cache(reseal(doc))                      # lookups compare bytes: fine
    with pytest.raises(BadDocument, match="key 0"):
        data.items()                                      # showing it: reported
    assert [k for k, _ in decode_cache(good_file()).items()] == [key("a"),
                                                                 key("b", training=False)]


def test_a_key_must_be_in_its_canonical_encoding():
    canonical = key("a", x=1, y=2)
    assert ProfileKey.from_encoded(canonical.encoded) == canonical
    shuffled = dict(reversed(list(msgpack.unpackb(canonical.encoded).items())))
    with pytest.raises(ValueError, match="canonical"):
        ProfileKey.from_encoded(msgpack.packb(shuffled, use_bin_type=True))


def test_an_entry_that_does_not_fit_its_key_is_not_used(tmp_path):
    inference_times = entry(training=False)              # no backward time
    (tmp_path / H100_FILE).write_bytes(encode_cache(H100, {key("a").encoded: inference_times}))
    cache = ProfileCache(H100, [tmp_path])
    assert cache.get(key("a")) is None and cache.misses == 1
