"""The node's GPU service: one process per GPU and user, shared by every reader.

``rundir`` says where services listen and who may reach them, ``wire`` the
messages, ``shm`` the shared host memory, ``server`` the service process,
``client`` the backend a reading process uses, ``main`` how a service
process starts. See ``docs/architecture.md`` and ``docs/gpu.md``.
"""
