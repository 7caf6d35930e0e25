"""The GPU decoder of a read batch: its column chunks decoded in the GPU service.

After a batch is decompressed into its images (shared memory the service
maps), :func:`decode_on_gpu` plans the chunks the GPU decodes
(:func:`dask_hwdecomp.gpudecode.plan.plan_batch`), has the service decode
them all in one measure and one write
(:meth:`dask_hwdecomp.service.client.ServiceClient.decode`), and wraps the
output as each image's ``decoded`` columns, whose Arrow buffers own the
shared output. pyarrow decodes every other column from the image, and
``why_not_gpu`` says why, per column.
"""

from __future__ import annotations

import logging

from .. import timeline
from ..errors import BackendUnavailableError
from ..gpudecode.assemble import assemble
from ..gpudecode.plan import DecodePlan, plan_batch
from ..options import Options
from ..report import ReadReport
from ..service.client import ServiceClient
from ..service.decoding import DecoderLost
from ..service.keeping import KeptRuns
from .image import Image

__all__ = ["decode_on_gpu", "plan_decode", "decoder_of", "LOST"]

logger = logging.getLogger("dask_hwdecomp")

# The report's reason for columns the GPU was to decode when its service was lost.
LOST = "the GPU service was lost during the decode"


def decoder_of(router) -> ServiceClient | None:
    """The GPU service connection a batch routed by ``router`` decodes through, if any."""
    backend = router.primary
    return backend if isinstance(backend, ServiceClient) else None


def _columns(image: Image) -> list[str]:
    """The leaf columns the image holds (the piece's planned chunks)."""
    names = []
    for chunk in image.plan.chunks:
        name = chunk.where.column
        if name is not None and name not in names:
            names.append(name)
    return names


def plan_decode(images: list[Image], dst: memoryview) -> DecodePlan:
    """The GPU decode plan of a batch's images in ``dst`` (their page headers and footers are all it reads)."""
    wanted = sorted({name for im in images for name in _columns(im)})
    with timeline.span("gpu_plan", pages=0) as fields:
        plan = plan_batch(images, wanted, within=dst)
        fields["pages"] = len(plan.pages)
    return plan


def decode_on_gpu(images: list[Image], dst: memoryview, backend: ServiceClient, options: Options,
                  report: ReadReport, kept: KeptRuns | None = None, planned: DecodePlan | None = None) -> None:
    """Decode the batch's GPU-decodable column chunks into each image's ``decoded``.

    ``kept``: the batch's runs whose outputs the service kept on the
    device (:meth:`ServiceClient.keeping`); the decode reads those pages
    there. ``planned``: :func:`plan_decode` of the images, made before
    they were decompressed (else it is made here). Where the decode fails
    and pyarrow decodes instead, pages only the device received are
    decompressed on the host first (``Image.restore``).

    Raises
    ------
    CorruptPageError
        A page the GPU decoder found invalid, named.
    BackendUnavailableError
        ``decode="gpu"`` and the service cannot run the GPU decoder.

    A decode lost with its service (:class:`DecoderLost`: it died, hung or
    failed, maybe for another reader's page) is decoded by pyarrow, with
    ``decode="gpu"`` too: the report says why and a warning is logged.
    """
    if not images:
        return
    plan = planned if planned is not None else plan_decode(images, dst)
    for image, fallbacks in zip(images, plan.fallbacks):
        image.why_not_gpu.update(fallbacks)
    if not len(plan.chunks):
        return
    try:
        out = backend.decode(plan, dst, kept)
    except (BackendUnavailableError, DecoderLost) as exc:
        if options.decode == "gpu" and isinstance(exc, BackendUnavailableError):
            raise
        reason = exc.reason if isinstance(exc, BackendUnavailableError) else f"{LOST}: {exc.reason}"
        logger.warning("decoding on the CPU: %s", reason)
        for image in images:
            if image.restore is not None:
                image.restore()
        for image, gpu in zip(images, plan.gpu_columns):
            for name in gpu:
                image.why_not_gpu[name] = reason
        return
    with timeline.span("gpu_assemble", nbytes=len(out.buffer)):
        per_image = assemble(out.buffer, out.owner, out.chunks, plan)
    for image, columns in zip(images, per_image):
        image.decoded.update(columns)
    if out.copied:
        report.output_copies += 1
        report.output_copied_bytes += len(out.buffer)
        logger.info("GPU-decoded columns copied out of shared memory: its pool is held by live arrays")
