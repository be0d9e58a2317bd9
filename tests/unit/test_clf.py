import pytest

from pipeline.kinds.hits.clf import ClfError, parse_line

GOOD = (
    '83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET /presentations/kibana-search.png HTTP/1.1" '
    '200 203023 "http://semicomplete.com/presentations/" "Mozilla/5.0 (Macintosh)"'
)


def test_combined_line() -> None:
    r = parse_line(GOOD)
    assert r.path == "/presentations/kibana-search.png"
    assert r.method == "GET"
    assert r.status == 200
    assert r.ts == 1431857103.0
    assert r.referrer.startswith("http://semicomplete.com")


def test_common_format_and_escaped_quotes_and_absolute_target() -> None:
    r = parse_line('1.2.3.4 - - [17/May/2015:10:05:03 +0200] "GET /a?q=%22x%22 HTTP/1.0" 304 -')
    assert r.path == "/a?q=%22x%22" and r.status == 304
    r = parse_line(r'1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET /b HTTP/1.1" 200 5 "-" "say \"hi\""')
    assert r.agent == r"say \"hi\""
    r = parse_line('1.2.3.4 - - [17/May/2015:10:05:03 +0000] "GET http://x.org/c/d HTTP/1.1" 200 5')
    assert r.path == "/c/d"


@pytest.mark.parametrize(
    "line, reason",
    [
        # the shape of the one odd line of the public access log: user agent never closed
        (
            '46.118.127.106 - - [20/May/2015:12:05:17 +0000] "GET /x.py HTTP/1.1" 200 235 "-" '
            '"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html',
            "unbalanced quotes",
        ),
        ("garbage", "combined log format"),
        ('1.2.3.4 - - [99/May/2015:10:05:03 +0000] "GET / HTTP/1.1" 200 5', "bad time"),
        ('1.2.3.4 - - [17/May/2015:10:05:03 +0000] "\\x16\\x03" 400 5', "bad request"),
    ],
)
def test_bad_lines_raise_with_reason(line: str, reason: str) -> None:
    with pytest.raises(ClfError, match=reason):
        parse_line(line)


def test_clf_time_fast_path_agrees_with_strptime() -> None:
    """The positional reader gives strptime's answer for random times and offsets, and
    refuses what strptime refuses (impossible dates and clocks)."""
    import random
    from datetime import datetime

    from pipeline.kinds.hits.clf import clf_time

    rng = random.Random(4)
    months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    for _ in range(2000):
        when = (
            f"{rng.randint(1, 28):02d}/{rng.choice(months)}/{rng.randint(1971, 2037)}:"
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} "
            f"{rng.choice('+-')}{rng.randint(0, 14):02d}{rng.choice([0, 30, 45]):02d}"
        )
        assert clf_time(when) == datetime.strptime(when, "%d/%b/%Y:%H:%M:%S %z").timestamp(), when
    for bad in (
        "31/Feb/2015:10:05:03 +0000",
        "17/May/2015:24:05:03 +0000",
        "17/May/2015:10:61:03 +0000",
        "17/Foo/2015:10:05:03 +0000",
        "17/May/2015:10:05:03 +00x0",
        "17/May/2015 10:05:03 +0000",
    ):
        with pytest.raises(ClfError):
            clf_time(bad)
