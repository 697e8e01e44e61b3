"""The console's session cookie and CSRF token (pure logic, no server): what a forged, tampered, expired or
foreign cookie gets, and that a CSRF token is bound to its session."""

from __future__ import annotations

from gateway.admin.console.session import SESSION_TTL_S, SessionSigner

NOW_S = 1_800_000_000.0


def test_a_cookie_round_trips_until_it_expires():
    signer = SessionSigner("admin-token")
    session, cookie = signer.issue(NOW_S)
    assert signer.verify(cookie, NOW_S) == session
    assert signer.verify(cookie, NOW_S + SESSION_TTL_S - 1) == session
    assert signer.verify(cookie, NOW_S + SESSION_TTL_S) is None


def test_another_gateway_with_the_same_token_accepts_it_and_a_changed_token_ends_it():
    _, cookie = SessionSigner("admin-token").issue(NOW_S)
    assert SessionSigner("admin-token").verify(cookie, NOW_S) is not None  # stateless: any instance
    assert SessionSigner("rotated-token").verify(cookie, NOW_S) is None


def test_tampered_and_malformed_cookies_are_refused():
    signer = SessionSigner("admin-token")
    _, cookie = signer.issue(NOW_S)
    version, expires, nonce, mac = cookie.split(".")
    later = str(int(expires) + 10 * SESSION_TTL_S)
    for bad in (
        f"{version}.{later}.{nonce}.{mac}",  # extended expiry
        f"{version}.{expires}.{nonce}x.{mac}",  # another session
        f"{version}.{expires}.{nonce}.{mac[:-1]}",  # truncated mac
        f"v0.{expires}.{nonce}.{mac}",
        "",
        None,
        "garbage",
        "...",
        cookie + ".",
    ):
        assert signer.verify(bad, NOW_S) is None, bad


def test_a_forged_cookie_with_a_well_formed_body_but_no_key_is_refused():
    forger = SessionSigner("guessed-token")
    _, forged = forger.issue(NOW_S)
    assert SessionSigner("admin-token").verify(forged, NOW_S) is None


def test_the_csrf_token_belongs_to_its_session():
    signer = SessionSigner("admin-token")
    mine, _ = signer.issue(NOW_S)
    theirs, _ = signer.issue(NOW_S)
    token = signer.csrf_token(mine)
    assert signer.csrf_ok(mine, token)
    assert not signer.csrf_ok(theirs, token)
    assert not signer.csrf_ok(mine, None)
    assert not signer.csrf_ok(mine, "")
    assert not signer.csrf_ok(mine, token[:-1])
    assert not SessionSigner("other-token").csrf_ok(mine, token)


def test_the_login_token_check():
    signer = SessionSigner("admin-token")
    assert signer.token_ok("admin-token")
    for wrong in ("", "admin-toke", "admin-token ", "ADMIN-TOKEN", "admin-token" * 100):
        assert not signer.token_ok(wrong)
