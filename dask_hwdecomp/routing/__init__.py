"""Which backend decompresses which page: the open backends and the routing table.

Above the GPU service (a GPU backend opened here is the service's client)
and below the read path, which routes every batch through a
:class:`~dask_hwdecomp.routing.router.Router`.
"""
