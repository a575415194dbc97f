"""Inputs that refuse bad values before any handler runs, and clean failure states.

One rule for every tab: a value a control cannot take (out of range, not whole, NaN, infinity, an
unreadable upload) is refused with the control's name and valid range, and nothing is computed;
Gradio's own checks let NaN through, clamp silently or fail with a generic message. Each class
keeps the stock front end (`is_template`), so only the server side changes.
"""

from __future__ import annotations

import math

import gradio as gr

from backend.core import bounds, image_header

from components.serving import range_guard


def keep_on_failure(event, outputs: list):
    """When `event` fails, leave its outputs as they were and clean. Returns `event` for chaining.

    Gradio 6.31 keeps a failed event's status on every output, an 'Error' badge over the last good
    result; a follow-up that changes nothing and completes with its progress hidden gives them a
    finished status again, so the view stays and the message lives in the toast only. One
    `gr.skip()` skips any number of outputs; a tuple of them would be one value for a single output,
    which Gradio refuses."""
    event.failure(lambda: gr.skip(), None, outputs, show_progress="hidden", queue=False, api_visibility="private")
    return event


def clear_unreadable(image: gr.Image) -> gr.Image:
    """An upload the image's own check refuses (a damaged or non-image file) is refused as soon as
    it arrives, with that check's message, and taken off the component: the browser would otherwise
    keep showing it as a broken-image icon, and the next click would be refused again."""
    # queued (a refusal outside the queue reaches the page as a bare 500, with no toast), but never
    # behind model work
    ev = image.upload(
        lambda _: gr.skip(), image, image, show_progress="hidden", concurrency_limit=None, api_visibility="private"
    )
    ev.failure(lambda: None, None, image, show_progress="hidden", queue=False, api_visibility="private")
    return image


class CheckedNumber(gr.Number):
    """A number box that refuses 'nan', 'inf', out-of-range and (precision 0) fractional values with
    its label and valid range, in the words of backend.core.bounds (the API's and the tools')."""

    is_template = True

    def preprocess(self, payload):
        if payload is None:
            return None
        r = bounds.Range(
            f"The {(self.label or 'value').split(' (')[0]}",
            -math.inf if self.minimum is None else self.minimum,
            math.inf if self.maximum is None else self.maximum,
            whole=self.precision == 0,
        )
        try:
            x = bounds.check(r, payload)
        except ValueError as e:
            raise gr.Error(str(e), print_exception=False) from None
        return super().preprocess(x)


class CheckedSlider(gr.Slider):
    """A slider that refuses a value it cannot take (out of range, not whole where the step is whole,
    NaN, infinity, text) with the message of backend.core.bounds, the one the API and the MCP tools
    give. Build it with `bounded_slider`: Gradio binds a component's constructor arguments by
    signature. In the browser, a number typed into its box is refused the same way (RANGE_JS)."""

    is_template = True
    what = "The value"
    unit = ""
    whole = None

    def preprocess(self, payload):
        # a slider rebuilt by a gr.update() (Gradio makes a new one from its constructor arguments)
        # has lost `what`: its label names it then
        name = self.what if self.what != "The value" or not self.label else f"The {self.label.split(' (')[0]}"
        whole = (
            self.whole
            if self.whole is not None
            else float(self.step or 1).is_integer() and float(self.minimum).is_integer()
        )
        try:
            x = bounds.check(bounds.Range(name, self.minimum, self.maximum, whole, self.unit), payload)
        except ValueError as e:
            raise gr.Error(str(e), print_exception=False) from None
        return super().preprocess(x)


def unreadable(name: str | None, what: str = "the uploaded file") -> str:
    """The one refusal of an image file that cannot be read (damaged, not an image, a decompression
    bomb), in every tab and on the API alike: the file's name (or what it is), why, what to do."""
    name = str(name)[:60] if name else what[:1].upper() + what[1:60]
    return (
        f"{name} could not be read as an image: it is not a PNG, JPEG or WebP "
        "picture, or it is damaged. Upload another image; nothing was computed."
    )


def check_image_header(payload, what: str = "the uploaded file") -> None:
    """An image input's file held against the one bound of every image input, from its header and
    before Gradio decodes it (a 13000×13000 PNG of 0.5 MB took 3.4 GB to decode): refused with its
    size and the bound, or as unreadable. Gradio has written the upload to its cache by then, so
    this reads a few kilobytes of a file, whatever the picture's size."""
    path = getattr(payload, "path", None)
    if not path:
        return
    name = str(getattr(payload, "orig_name", None) or what[:1].upper() + what[1:])[:60]
    try:
        image_header.check_file(path, name)
    except image_header.Unreadable:
        raise gr.Error(unreadable(getattr(payload, "orig_name", None), what), print_exception=False) from None
    except ValueError as e:
        raise gr.Error(str(e), print_exception=False) from None


class CheckedImage(gr.Image):
    """An image upload checked from its header before it is decoded (`check_image_header`), whose
    unreadable file (corrupt, not an image) gets a clear message naming it; `what` says which image
    it is ("the reference image"; see `checked_image`)."""

    is_template = True
    what = "the uploaded file"

    def preprocess(self, payload):
        check_image_header(payload, self.what)
        try:
            return super().preprocess(payload)
        except gr.Error:
            raise
        except Exception:  # PIL's UnidentifiedImageError, a truncated file, a decompression bomb
            raise gr.Error(unreadable(getattr(payload, "orig_name", None), self.what), print_exception=False) from None


class CheckedRadio(gr.Radio):
    """A radio whose value must be one of its choices, refused in the words of
    backend.core.bounds.check_choice (the API's and the MCP tools'), not Gradio's own. Build it with
    `checked_radio`, which names the argument as the API and the tools do."""

    is_template = True
    what = "The choice"

    def preprocess(self, payload):
        if payload is not None:
            try:
                bounds.check_choice(self.what, payload, [v for _, v in self.choices])
            except ValueError as e:
                raise gr.Error(str(e), print_exception=False) from None
        return super().preprocess(payload)


def checked_radio(name: str, choices, **kwargs) -> CheckedRadio:
    """A radio over `choices` (values, or (label, value) pairs) named `name` in its refusals."""
    r = CheckedRadio(choices, **kwargs)
    r.what = name
    return r


def bounded_slider(r: bounds.Range, hi: float | None = None, **kwargs) -> CheckedSlider:
    """A slider over the declared range `r` (its upper end lowered to `hi` where the data allows
    less: a model's memorized prompts, a layer's rank)."""
    top = r.hi if hi is None else min(r.hi, hi)
    s = CheckedSlider(r.lo, top, **kwargs)
    s.what, s.unit, s.whole = r.name, r.unit, r.whole
    range_guard.declare(s.elem_id, r)
    return s


def checked_image(*args, what: str = "the uploaded file", **kwargs) -> CheckedImage:
    im = CheckedImage(*args, **kwargs)
    im.what = what
    return im
