"""The kernels' doors: one unix socket per kernel through which its sandboxed agent reaches the vault,
the summaries and the bus. Who asks is known by which socket the request came on (each socket is
bound into one kernel's sandbox only), never by an environment variable or a field of the request.

`service.DoorService(brain)` has start()/stop() (a service the federation daemon hosts:
"nika_brain.federation.doors.service:DoorService"); `python -m nika_brain.federation.doors` and
`nika-brain federation doors` run it in the foreground.
"""
