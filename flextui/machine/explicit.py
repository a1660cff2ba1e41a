"""The explicit layout: every device ([[devices]]), switch ([[switches]] or
``switches = [...]``) and link ([[links]]) listed by name."""

from __future__ import annotations

from flextui.fields import describe
from flextui.limits import DEVICES, LINKS
from flextui.machine.layout import Layout

__all__ = ["build_explicit"]

DEVICE_KEYS = ("name", "kind", "node")


def build_explicit(data: dict, layout: Layout) -> None:
    """Lay out the devices, switches and links of ``data`` (which has [[devices]]),
    counted against flextui's limits first."""
    f = layout.fields
    devices, links = data["devices"], data.get("links", [])
    if isinstance(devices, list):
        f.within(DEVICES, len(devices), "devices")
    if isinstance(links, list):
        directed = sum(1 if isinstance(t, dict) and t.get("duplex") is False else 2
                       for t in links)
        f.within(LINKS, directed, "links")
    names: dict[str, str] = {}      # device or switch name -> the field that declared it
    _devices(data["devices"], layout, names)
    _switches(data.get("switches", []), layout, names)
    _links(data.get("links", []), layout, names)


def _devices(value: object, layout: Layout, names: dict[str, str]) -> None:
    f = layout.fields
    devices = f.array_of_tables(value, "devices")
    if not devices:
        f.fail("devices", "is empty; declare at least one [[devices]] entry")
    for i, t in enumerate(devices):
        field = f"devices[{i}]"
        f.check_keys(t, DEVICE_KEYS, field)
        name = f.name(f.required(t, "name", field, 'name = "gpu0"'), f"{field}.name")
        if name in names:
            f.fail(f"{field}.name", f"{name!r} is already used by {names[name]}")
        names[name] = field
        spec = layout.spec(f.required(t, "kind", field, 'kind = "P100"'), f"{field}.kind")
        node = f.integer(t.get("node", 0), f"{field}.node", 0)
        layout.add_device(name, node, spec)


def _switches(value: object, layout: Layout, names: dict[str, str]) -> None:
    f = layout.fields
    if not isinstance(value, list):
        f.fail("switches", f"expected an array, found {describe(value)}; write "
                           f'[[switches]] blocks with name = "...", or switches = ["sw0"]')
    for i, s in enumerate(value):
        field = f"switches[{i}]"
        if isinstance(s, dict):
            f.check_keys(s, ("name",), field)
            s = f.required(s, "name", field, 'name = "sw0"')
            field += ".name"
        s = f.name(s, field)
        if s in names:
            f.fail(field, f"{s!r} is already used by {names[s]}")
        names[s] = field
        layout.switches.append(s)


def _links(value: object, layout: Layout, names: dict[str, str]) -> None:
    f = layout.fields
    for i, t in enumerate(f.array_of_tables(value, "links")):
        field = f"links[{i}]"
        a, b, kind, bandwidth, latency, duplex = f.link_spec(t, field)
        for end, key in ((a, "a"), (b, "b")):
            if end not in names:
                f.fail(f"{field}.{key}", f"{end!r} is neither a device nor a switch; "
                                         f"declare it in [[devices]] or [[switches]], "
                                         f"or fix the name")
        layout.add_link(a, b, kind, bandwidth, latency, duplex, field)
