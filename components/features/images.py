"""The images a user brings to the Features tab for an index: uploaded files, one uploaded zip, or a
server folder under the allowed roots. Small sets only; larger ones go to the sharded CLI job.

Every image is checked from its header (format, size against the bound Analyse and Steer use) and,
in a zip, from the sizes the zip declares, before a byte of it is written or a pixel decoded. What a
refused or cancelled build wrote is removed again, and a visitor's new index replaces the previous
one on disk (the quota counts what is in use)."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from backend.core import image_header
from backend.core import presets as P
from backend.core import sessions
from backend.sae import analysis, hub_index, organism
from backend.sae.index import IMAGE_SUFFIXES, ImageSource
from backend.sae import visitor
from components.common import fail
from components.serving.visitor import space

MAX_TAB_IMAGES = 256  # an index built from the tab; larger sets go to the sharded command-line job
MAX_ZIP_BYTES = 512 * 2**20  # uncompressed, all images of one uploaded zip together


@dataclass
class Build:
    """Where an index built from the tab and its uploaded images go: the visitor's own session
    folder (`images` set), or, when the owner shares builds (WORKBENCH_SHARED_BUILDS=1), the
    organism's index file for everyone (`images` None: beside that file). `made`: the folders this
    build created, removed if it is refused or cancelled."""

    org: object
    space: sessions.Space
    images: Path | None
    made: list[Path] = field(default_factory=list)

    def room(self, n_bytes: int) -> None:
        if self.images is not None:
            self.space.room(n_bytes, "the uploaded images")

    def index_file(self, src: "ImageSource") -> Path:
        if self.images is None:
            return Path(self.org.index_out)
        names = [src.name(i) for i in range(len(src))]
        return visitor.index_file(self.images.parent / "index", self.org, names, src.digest())

    @property
    def note(self) -> str:
        return "" if self.images is None else " (your own index: only this session sees it)"

    def discard(self) -> None:
        """The build was refused or cancelled: what it wrote goes."""
        for p in self.made:
            shutil.rmtree(p, ignore_errors=True)
        self.made.clear()

    def installed(self, source: str, out: Path, src: "ImageSource") -> str:
        """The source that shows the new index (the visitor's own), within the quota; the visitor's
        earlier index and the images only it used are deleted (one index is in use at a time)."""
        if self.images is None:
            organism.refresh_index(self.org)  # the shared file: every visitor picks it up
            return source
        self.space.keep_within([out.parent], "the index")
        keep = {Path(out).parent.resolve(), Path(src.root).resolve()}
        for d in [*self.images.glob("images-*"), *(self.images.parent / "index").glob("*")]:
            if d.is_dir() and d.resolve() not in keep:
                shutil.rmtree(d, ignore_errors=True)
        return visitor.session_source(visitor.base_of(source), out)


def shown_place(folder: str | Path) -> str:
    """A folder of images as a page names it: never a server path (nor a session folder's key)."""
    return "your upload" if sessions.within(folder) else Path(folder).name


def own_build(org, request) -> Build:
    own = space(request, visitor.SPACE, write=True)
    return Build(org, own, own.make("images"))


def own_labels(source: str, org, request) -> str:
    """The source under which a visitor's model labels are kept: a visitor's own index keeps them
    beside it already; the shared index gets a labels file in the visitor's folder (starting from
    the shared labels), so the owner's labels.json is never written by a visitor."""
    if visitor.is_session(source) or org.index_path is None:
        return source
    folder = space(request, visitor.SPACE, write=True).make("labels")
    if folder is None:  # shared builds: the labels beside the shared index, for everyone
        return source
    name = sessions.content_name([str(org.index_path)], 12) + "-labels.json"
    return visitor.session_source(source, org.index_path, folder / name)


def collect_images(org, files, folder: str, build: Build | None = None) -> "ImageSource":
    """The images to index from the tab: uploaded files (copied under the build's folder, a visitor's
    own, else beside the index, which refers to them by name) or a server folder under the allowed
    roots. Each image's header is checked first; a copy that would not fit the visitor's quota is
    refused before it is written; a folder this call creates is listed in `build.made`."""
    build = build or Build(org, "", None)
    dest_root = build.images if build.images is not None else Path(org.index_out).parent
    if files:
        paths = [Path(getattr(f, "name", f)) for f in (files if isinstance(files, list) else [files])]
        if any(p.suffix.lower() == ".zip" for p in paths):
            if len(paths) != 1:
                fail("Upload one zip of images, or the images themselves, not both.")
            return images_from_zip(org, paths[0], dest_root, build)
        if len(paths) > MAX_TAB_IMAGES:
            fail(
                f"{len(paths)} images: at most {MAX_TAB_IMAGES} from the tab; index larger sets with: "
                f"{hub_index.index_command(org)}"
            )
        for p in paths:
            if p.suffix.lower() not in IMAGE_SUFFIXES:
                fail(f"{p.name} is not an image ({', '.join(IMAGE_SUFFIXES)}).")
            _checked(p, p.name, p.stat().st_size)
        h = hashlib.sha256()
        for p in paths:
            h.update(p.read_bytes())
        dest = dest_root / f"images-{h.hexdigest()[:12]}"
        if not dest.is_dir():
            build.room(sum(p.stat().st_size for p in paths))
            build.made.append(dest)
        dest.mkdir(parents=True, exist_ok=True)
        for i, p in enumerate(paths):
            shutil.copyfile(p, dest / f"{i:04d}_{p.name}")
        return ImageSource.folder(dest)
    if folder and folder.strip():
        src = ImageSource.folder(P.validate_local_path(folder.strip()))
        if len(src) > MAX_TAB_IMAGES:
            fail(
                f"{len(src)} images: at most {MAX_TAB_IMAGES} from the tab; for a folder this size run: "
                f"{hub_index.index_command(org)}"
            )
        for name in src.files:
            path = Path(src.root) / name
            _checked(path, name, path.stat().st_size)
        return src
    fail("Upload some images or name a folder to index.")


def _checked(f, name: str, n_bytes: int) -> None:
    """The image's header (read from `f`, a path or an open file) against the bound of every image
    input of the tab (analysis.MAX_SIDE), and its size in bytes against its pixels."""
    try:
        image_header.check(image_header.size_of(f, name), name, analysis.MAX_SIDE, n_bytes)
    except ValueError as e:
        fail(str(e))


def images_from_zip(org, path: Path, dest_root: Path, build: Build) -> "ImageSource":
    """The images of an uploaded zip, unpacked under `dest_root` (the index refers to them by name):
    image files only, at any depth, by their base names (so no entry can point outside the folder),
    up to MAX_TAB_IMAGES and MAX_ZIP_BYTES uncompressed, as the zip's directory states them, each
    entry's header read (from the first kilobytes it inflates) before anything is written."""
    try:
        with zipfile.ZipFile(path) as z:
            entries = [
                i
                for i in z.infolist()
                if not i.is_dir()
                and Path(i.filename).suffix.lower() in IMAGE_SUFFIXES
                and not Path(i.filename).name.startswith(".")
            ]
            if not entries:
                fail(f"{path.name} holds no images ({', '.join(IMAGE_SUFFIXES)}).")
            if len(entries) > MAX_TAB_IMAGES:
                fail(
                    f"{path.name} holds {len(entries)} images: at most {MAX_TAB_IMAGES} from the tab; unpack it "
                    f"and run: {hub_index.index_command(org)}"
                )
            if sum(i.file_size for i in entries) > MAX_ZIP_BYTES:
                fail(f"{path.name} unpacks to more than {MAX_ZIP_BYTES // 2**20} MiB of images.")
            for info in entries:
                name = Path(info.filename).name
                with z.open(info) as f:
                    _checked(f, name, info.file_size)
            dest = dest_root / f"images-{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"
            if not dest.is_dir():
                build.room(sum(i.file_size for i in entries))
                build.made.append(dest)
            dest.mkdir(parents=True, exist_ok=True)
            for n, info in enumerate(sorted(entries, key=lambda i: i.filename)):
                with z.open(info) as f, open(dest / f"{n:04d}_{Path(info.filename).name}", "wb") as out:
                    shutil.copyfileobj(f, out, 2**20)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as e:
        fail(f"{path.name} is not a readable zip file ({type(e).__name__}).")
    return ImageSource.folder(dest)
