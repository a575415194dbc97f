"""Inputs that refuse bad values before any handler runs, and clean failure states.

One rule for every tab: a value a control cannot take (out of range, not whole, NaN, infinity, an
unreadable upload) is refused with the control's name and valid range, and nothing is computed;
Gradio's own checks let NaN through, clamp silently or fail with a generic message. Each class
keeps the stock front end (`is_template`), so only the server side changes.
"""
from __future__ import annotations

import math

import gradio as gr


def keep_on_failure(event, outputs: list):
    """When `event` fails, leave its outputs as they were and clean. Returns `event` for chaining.

    Gradio 6.31 keeps a failed event's status on every output, an 'Error' badge over the last good
    result; a follow-up that changes nothing and completes with its progress hidden gives them a
    finished status again, so the view stays and the message lives in the toast only. One
    `gr.skip()` skips any number of outputs; a tuple of them would be one value for a single output,
    which Gradio refuses."""
    event.failure(lambda: gr.skip(), None, outputs, show_progress="hidden",
                  queue=False, api_visibility="private")
    return event


def clear_unreadable(image: gr.Image) -> gr.Image:
    """An upload the image's own check refuses (a damaged or non-image file) is refused as soon as
    it arrives, with that check's message, and taken off the component: the browser would otherwise
    keep showing it as a broken-image icon, and the next click would be refused again."""
    # queued (a refusal outside the queue reaches the page as a bare 500, with no toast), but never
    # behind model work
    ev = image.upload(lambda _: gr.skip(), image, image, show_progress="hidden", concurrency_limit=None,
                      api_visibility="private")
    ev.failure(lambda: None, None, image, show_progress="hidden", queue=False, api_visibility="private")
    return image


def range_words(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"between {lo:g} and {hi:g}"
    return f"at least {lo:g}" if lo is not None else f"at most {hi:g}"


class CheckedNumber(gr.Number):
    """A number box that refuses empty, 'nan', 'inf', out-of-range and (precision 0) fractional values
    by its label and valid range."""
    is_template = True

    def preprocess(self, payload):
        if payload is None:
            return None
        name = (self.label or "value").split(" (")[0]
        try:
            x = float(payload)
        except (TypeError, ValueError):
            raise gr.Error(f"The {name} must be a number.", print_exception=False) from None
        bounded = (self.minimum, self.maximum) != (None, None)
        bounds = range_words(self.minimum, self.maximum) if bounded else ""
        if not math.isfinite(x):
            raise gr.Error(f"The {name} must be a finite number{', ' + bounds if bounds else ''}; got {payload}.",
                           print_exception=False)
        if (self.minimum is not None and x < self.minimum) or (self.maximum is not None and x > self.maximum):
            raise gr.Error(f"The {name} must be {bounds}; got {x:g}. Nothing was computed.", print_exception=False)
        if self.precision == 0 and x != int(x):
            raise gr.Error(f"The {name} must be a whole number; got {x:g}.", print_exception=False)
        return super().preprocess(x)


class CheckedSlider(gr.Slider):
    """A slider that refuses a value it cannot take (out of range, not whole where the step is 1, NaN,
    infinity, text) with the valid range; `what` names it in the message ("the number of seeds").
    Build it with `checked_slider`: Gradio binds a component's constructor arguments by signature."""
    is_template = True
    what = "the value"

    def preprocess(self, payload):
        lo, hi = self.minimum, self.maximum
        whole = float(self.step or 0) == 1.0
        ok = isinstance(payload, (int, float)) and not isinstance(payload, bool) and math.isfinite(payload)
        ok = ok and lo <= payload <= hi and (not whole or float(payload).is_integer())
        if not ok:
            kind = "a whole number" if whole else "a number"
            # a slider rebuilt by a gr.update() (Gradio makes a new one from its constructor
            # arguments) has lost `what`: its label names it then
            what = self.what if self.what != "the value" or not self.label else f"the {self.label.split(' (')[0]}"
            raise gr.Error(f"Choose {what}: {kind} from {lo:g} to {hi:g} (got {str(payload)[:20]!s}).",
                           print_exception=False)
        return super().preprocess(payload)


class CheckedImage(gr.Image):
    """An image upload whose unreadable file (corrupt, not an image, a decompression bomb) gets a clear
    message naming it; `what` says which image it is ("the reference image"; see `checked_image`)."""
    is_template = True
    what = "the uploaded file"

    def preprocess(self, payload):
        try:
            return super().preprocess(payload)
        except gr.Error:
            raise
        except Exception as e:  # PIL's UnidentifiedImageError, a truncated file, a decompression bomb
            name = getattr(payload, "orig_name", None) or "the file"
            raise gr.Error(f"{self.what[:1].upper()}{self.what[1:]} could not be read as an image ({str(name)[:60]} "
                           f"is not a PNG, JPEG or WebP picture, or it is damaged: {type(e).__name__}); "
                           "upload another.", print_exception=False) from None


def checked_slider(*args, what: str = "the value", **kwargs) -> CheckedSlider:
    s = CheckedSlider(*args, **kwargs)
    s.what = what
    return s


def checked_image(*args, what: str = "the uploaded file", **kwargs) -> CheckedImage:
    im = CheckedImage(*args, **kwargs)
    im.what = what
    return im
