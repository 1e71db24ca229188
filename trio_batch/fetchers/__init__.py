"""Built-in fetch functions for the runner: :func:`http_fetch` and :class:`HttpFetcher`.

``http_fetch`` fetches ``http://``, ``https://`` and ``file://`` URLs and turns the body into
text according to the target's :class:`~trio_batch.Options`::

    async with open_runner(store, http_fetch) as runner:
        ...

It needs the ``cli`` extra (``pip install 'trio-batch[cli]'``): httpx for HTTP, selectolax for
``mode: text`` and ``markdown``, trafilatura for ``mode: main``, jq for ``jq``, pypdf for PDF
bodies. The heavier ones are imported only when a target uses them.

Every failure raises a :class:`FetchError` subclass whose ``hint`` says what to do about it; the
runner stores ``"ClassName: message"`` as the target's error and the hint beside it.

A service that fetches URLs sent by others puts :class:`DestinationPolicy` (the SSRF policy) in
front of the fetcher; :func:`builtin_fetch` is that combination, the fetch function of
``trio-batch serve``.

The package's modules: ``_errors`` (the exception tree), ``_http`` (:class:`HttpFetcher`),
``_options`` (a target's options, checked at submit and before any I/O), ``_body`` (turning a
body into text), ``_markup`` (HTML to text and Markdown, with ``_markdown`` for Markdown's
inline marks and escapes), ``_bounded`` (the worker processes) with ``_shares`` (who gets the
next one, fairly between callers), ``_ssrf`` (:class:`DestinationPolicy`), ``_builtin`` (the
service's fetch function) and ``_webhook`` (:class:`WebhookSender`, which signs and sends
jobs' terminal events).

Options
-------
``mode``
    ``raw`` (the default): the body decoded as text. ``text``: HTML turned into readable text;
    ``markdown``: HTML as CommonMark (headings, lists, links, images, tables) that renders as
    the page reads, its depth bounded; ``main``: the page's main content as Markdown, without
    navigation and boilerplate. Other bodies are left as they are.
``grep``
    A Python regular expression; only the lines that match are kept. With ``context: true`` the
    neighbouring lines are kept too, and groups that are not adjacent are separated by ``--``
    (as ``grep -C`` does).
``jq``
    A jq program run on a JSON body. Each output is one line: strings as they are, other values
    as compact JSON (``jq -r -c``).
``pages``
    For PDF bodies: which pages' text to keep, 1-based, e.g. ``1-3,5,8-``. A PDF body without
    ``pages`` gives the text of every page.
``snapshot``, ``replay``, ``on_miss``, ``revalidate``
    Keep the raw response in the job's snapshot; take it from another job's snapshot instead
    of the network (see ``_recorded`` and ``_snapshots``). They need the fetcher's
    ``snapshots``.
``question``, ``recover``
    Not supported by this fetcher; a target that sets them fails with a hint.

Processing order: body → PDF text or jq or HTML conversion → grep; the result is capped at
the fetcher's ``max_output``.
"""

from ._body import grep_lines
from ._bounded import WorkerPool, WorkerStatistics
from ._builtin import builtin_fetch, load_fetch
from ._errors import (
    RETRYABLE_STATUSES,
    ContentError,
    DestinationRefused,
    FetchError,
    FetchTimeout,
    HTTPStatusError,
    LocalFileError,
    NetworkError,
    OptionError,
    OutputTooLarge,
    RedirectError,
    ResponseTooLarge,
    RobotsDisallowed,
    UnsupportedOption,
    URLError,
    URLRefused,
)
from ._hosts import HostFigures
from ._http import CheckURL, HttpFetcher, http_fetch, parse_retry_after
from ._markup import html_to_markdown, html_to_text, main_content
from ._recording import Recording, ReplayRefused, check_replays
from ._snapshots import (
    SnapshotError,
    SnapshotFull,
    SnapshotMiss,
    SnapshotStore,
    snapshot_root,
)
from ._ssrf import DestinationPolicy, Resolver, forbidden_reason
from ._warc import WarcError, import_warc, warc_records
from ._webhook import WebhookSender, load_webhook_secret

__all__ = [
    "RETRYABLE_STATUSES",
    "CheckURL",
    "ContentError",
    "DestinationPolicy",
    "DestinationRefused",
    "FetchError",
    "FetchTimeout",
    "HTTPStatusError",
    "HostFigures",
    "HttpFetcher",
    "LocalFileError",
    "NetworkError",
    "OptionError",
    "OutputTooLarge",
    "Recording",
    "RedirectError",
    "ReplayRefused",
    "Resolver",
    "ResponseTooLarge",
    "RobotsDisallowed",
    "SnapshotError",
    "SnapshotFull",
    "SnapshotMiss",
    "SnapshotStore",
    "URLError",
    "URLRefused",
    "UnsupportedOption",
    "WarcError",
    "WebhookSender",
    "WorkerPool",
    "WorkerStatistics",
    "builtin_fetch",
    "check_replays",
    "forbidden_reason",
    "grep_lines",
    "html_to_markdown",
    "html_to_text",
    "http_fetch",
    "import_warc",
    "load_fetch",
    "load_webhook_secret",
    "main_content",
    "parse_retry_after",
    "snapshot_root",
    "warc_records",
]
