"""The red-teaming socket's bounds are the battle socket's: the same idle timeout and close code,
and one per-address cap counted over both kinds of socket."""

import pytest
from channels.testing import WebsocketCommunicator

from arena.live.websocket import CLOSE_IDLE, CLOSE_TOO_MANY_SOCKETS, too_many_sockets_frame
from config.asgi import application

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.redis,
]

FRAME_TIMEOUT = 10
HEADERS = [(b"origin", b"http://testserver"), (b"host", b"testserver")]


async def socket_from(path: str, address: str) -> tuple[WebsocketCommunicator, dict]:
    """A socket on ``path`` from this client address, and the first thing the server sent it."""
    comm = WebsocketCommunicator(application, path, headers=HEADERS)
    comm.scope["client"] = (address, 40000)
    await comm.send_input({"type": "websocket.connect"})
    return comm, await comm.receive_output(FRAME_TIMEOUT)


async def assert_closed(comm: WebsocketCommunicator, code: int) -> None:
    """The server closes the socket with ``code``; the client then goes as a browser does."""
    closed = await comm.receive_output(FRAME_TIMEOUT)
    assert closed == {"type": "websocket.close", "code": code}
    await comm.send_input({"type": "websocket.disconnect", "code": code})
    await comm.wait(FRAME_TIMEOUT)


async def assert_refused(comm: WebsocketCommunicator, accept: dict) -> None:
    assert accept["type"] == "websocket.accept"  # accepted only to say why
    assert await comm.receive_json_from(FRAME_TIMEOUT) == too_many_sockets_frame()
    await assert_closed(comm, CLOSE_TOO_MANY_SOCKETS)


async def test_an_idle_redteam_socket_is_closed_with_the_battle_sockets_idle_code(settings):
    settings.ARENA_WS_IDLE_SECONDS = 0.2
    comm, accept = await socket_from("/ws/redteam", "192.0.2.11")
    assert accept["type"] == "websocket.accept"
    await assert_closed(comm, CLOSE_IDLE)


async def test_redteam_and_battle_sockets_share_the_per_address_cap(settings):
    settings.ARENA_WS_MAX_PER_ADDRESS = 2
    settings.ARENA_WS_IDLE_SECONDS = 0  # never idle: only the cap closes sockets here
    redteam, accept = await socket_from("/ws/redteam", "192.0.2.12")
    assert accept["type"] == "websocket.accept"
    battle, accept = await socket_from("/ws/battle", "192.0.2.12")
    assert accept["type"] == "websocket.accept"
    for path in ("/ws/battle", "/ws/redteam"):
        await assert_refused(*await socket_from(path, "192.0.2.12"))
    await redteam.disconnect()
    await battle.disconnect()


async def test_an_idle_redteam_socket_once_closed_frees_its_slot_for_a_battle_socket(settings):
    settings.ARENA_WS_MAX_PER_ADDRESS = 1
    settings.ARENA_WS_IDLE_SECONDS = 0.2
    redteam, accept = await socket_from("/ws/redteam", "192.0.2.13")
    assert accept["type"] == "websocket.accept"
    await assert_closed(redteam, CLOSE_IDLE)

    settings.ARENA_WS_IDLE_SECONDS = 0
    battle, accept = await socket_from("/ws/battle", "192.0.2.13")
    assert accept["type"] == "websocket.accept"
    await battle.send_json_to({"type": "launch"})
    assert (await battle.receive_json_from(FRAME_TIMEOUT))["code"] == "invalid"  # served
    await battle.disconnect()
