"""ipywidgets helpers for the notebooks (ipywidgets is imported inside, so `utils` stays light)."""

from __future__ import annotations

__all__ = ["device_widget"]


def device_widget(default: str | None = None, *, extra: tuple[str, ...] = ("AUTO",)):
    """A dropdown of the OpenVINO devices on this machine; defaults to GPU when an Intel GPU is present.

    Args:
        default: the device to preselect (falls back to `utils.stack.default_device()` when absent).
        extra: virtual devices offered after the real ones.
    """
    import ipywidgets as widgets

    from utils.stack import default_device, list_devices

    devices = list_devices()
    options = [device for device, _ in devices] + [device for device in extra if device not in dict(devices)]
    value = default if default in options else default_device(devices)
    return widgets.Dropdown(options=options, value=value, description="Device:")
