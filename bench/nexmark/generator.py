"""The Nexmark event generator: persons, auctions and bids, deterministic from a seed, written as CSV.

The rules are Nexmark's (github.com/nexmark/nexmark, the generator Flink's and Beam's Nexmark
suites share), re-stated here in Python with ``random.Random(seed)`` in place of Java's unseeded
``SplittableRandom``, so one seed always gives the same file:

- Event ids run 0, 1, 2, ...; ``id % 50`` picks the kind with the proportions person 1 : auction 3 :
  bid 46. Person ids and auction ids are dense, from 1000, in event-id order (the n-th person of the
  stream has id 1000 + n); categories are 10..14.
- Event time: ``first_event_rate`` events per second (10,000: 100 µs apart) from ``BASE_TIME``.
  Out of order as Nexmark does it: the stream is cut in groups of ``out_of_order_group_size``
  events and each group is emitted permuted (the k-th event of group g is event
  ``g·n + (k·953) mod n``), its id and timestamp those of the event it became. So an event is at
  most ``n - 1`` events (``(n - 1) / rate`` seconds) behind the latest one before it.
- Sellers and bidders: with probability 3/4 (``hot_sellers_ratio`` = ``hot_bidders_ratio`` = 4) a
  hot one (the first, or for bidders the second, person of the latest batch of 100), else one of
  the 1,000 most recent persons plus 10 "leads" (ids not issued yet). Bids go with probability 1/2
  (``hot_auction_ratio`` = 2) to the first auction of the latest batch of 100, else to one of the
  100 auctions in flight plus 10 leads. (nexmark/nexmark's Flink generator adds the first person
  id to a bidder twice, so its bidders are never persons; Beam's adds it once, as here.)
- Prices ``round(10^(6u) · 100)`` cents (u uniform in [0, 1)); an auction's reserve is its initial
  bid plus another price; it expires a uniform 1..2h ms after it opens, h the time until 100 more
  auctions have opened (~167 ms at 10,000 events/s).
- Half of the bids come through one of four hot channels (Google, Facebook, Baidu, Apple), the rest
  through ``channel-i`` (i < 10,000), each with its URL; ``extra`` pads each event to Nexmark's
  average sizes (person 200, auction 500, bid 100 bytes).

The file layout is Nexmark's one table of all events (``event_type`` and one column group per kind,
empty for the others), flattened to CSV columns (``COLUMNS``); times are epoch milliseconds. No
generated string contains a comma, so a line splits on ``,``.
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PERSON, AUCTION, BID = 0, 1, 2
COLUMNS = (
    "event_type", "date_time",
    "p_id", "p_name", "p_email", "p_credit_card", "p_city", "p_state", "p_extra",
    "a_id", "a_item_name", "a_description", "a_initial_bid", "a_reserve", "a_expires", "a_seller", "a_category", "a_extra",
    "b_auction", "b_bidder", "b_price", "b_channel", "b_url", "b_extra",
)
PERSON_COLUMNS, AUCTION_COLUMNS, BID_COLUMNS = slice(2, 9), slice(9, 18), slice(18, 24)
BASE_TIME = 1_700_000_000_000  # ms, 2023-11-14T22:13:20Z: a multiple of every window size used

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
HOT_BATCH = 100  # hot sellers, bidders and auctions: the first of the latest batch of this many
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
CHANNELS_NUMBER = 10_000

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")


@dataclass(frozen=True)
class Config:
    """Nexmark's generator settings (its defaults, but for the out-of-order group: Nexmark's default
    of 1 would keep every event in order)."""

    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    first_event_rate: int = 10_000  # events per second of event time
    out_of_order_group_size: int = 1_000  # 100 ms of event time at 10,000 events/s
    num_active_people: int = 1_000
    num_in_flight_auctions: int = 100
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100

    def __post_init__(self) -> None:
        for name in ("person_proportion", "auction_proportion", "bid_proportion", "first_event_rate", "out_of_order_group_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"Nexmark config: {name} must be at least 1, got {getattr(self, name)}")

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    def timestamp(self, event_number: int) -> int:
        """Event time (ms) of event ``event_number``: ``rate`` events per second from BASE_TIME."""
        return BASE_TIME + event_number * 1000 // self.first_event_rate

    def max_disorder_ms(self) -> int:
        """How far an event's time can lie behind the latest one before it in the stream."""
        return self.timestamp(self.out_of_order_group_size - 1) - BASE_TIME

    def adjusted_event_number(self, count: int) -> int:
        """The event the ``count``-th one emitted stands for: its group permuted by a stride of 953."""
        n = self.out_of_order_group_size
        return (count // n) * n + (count * 953) % n

    def last_base0_person_id(self, event_id: int) -> int:
        epoch, offset = divmod(event_id, self.total_proportion)
        if offset >= self.person_proportion:
            offset = self.person_proportion - 1
        return epoch * self.person_proportion + offset

    def last_base0_auction_id(self, event_id: int) -> int:
        epoch, offset = divmod(event_id, self.total_proportion)
        if offset < self.person_proportion:  # a person: the last auction of the previous epoch
            epoch -= 1
            offset = self.auction_proportion - 1
        elif offset >= self.person_proportion + self.auction_proportion:  # a bid: this epoch's last auction
            offset = self.auction_proportion - 1
        else:
            offset -= self.person_proportion
        return epoch * self.auction_proportion + offset

    def kind(self, event_id: int) -> int:
        rem = event_id % self.total_proportion
        if rem < self.person_proportion:
            return PERSON
        return AUCTION if rem < self.person_proportion + self.auction_proportion else BID


class Generator:
    """Events as CSV lines, in stream order. Everything random comes from one ``random.Random(seed)``."""

    def __init__(self, config: Config = Config(), seed: int = 0) -> None:
        if config.num_active_people < 1 or config.num_in_flight_auctions < 0:
            raise ValueError("Nexmark config: num_active_people must be >= 1 and num_in_flight_auctions >= 0")
        self.config = config
        self.rng = random.Random(seed)
        rng = self.rng
        self._extra_pool = "".join(chr(97 + rng.randrange(26)) for _ in range(1 << 16))
        self._hot_urls = tuple(self._base_url() for _ in HOT_CHANNELS)
        self._channels = []
        for i in range(CHANNELS_NUMBER):
            url = self._base_url()
            if rng.randrange(10) > 0:
                url += f"&channel_id={_abs_bit_reversed(i)}"
            self._channels.append((f"channel-{i}", url))
        self.count = 0  # events emitted so far

    # -- pieces --------------------------------------------------------------------------------

    def _string(self, max_length: int, special: str = " ") -> str:
        rng = self.rng
        length = 3 + rng.randrange(max_length - 3)
        chars = [special if rng.randrange(13) == 0 else chr(97 + rng.randrange(26)) for _ in range(length)]
        return "".join(chars).strip()

    def _base_url(self) -> str:
        return f"https://www.nexmark.com/{self._string(5, '_')}/{self._string(5, '_')}/{self._string(5, '_')}/item.htm?query=1"

    def _extra(self, current_size: int, desired_average: int) -> str:
        if current_size > desired_average:
            return ""
        desired_average -= current_size
        delta = int(desired_average * 0.2 + 0.5)
        size = desired_average - delta + (self.rng.randrange(2 * delta) if delta else 0)
        offset = self.rng.randrange(len(self._extra_pool) - size)
        return self._extra_pool[offset:offset + size]

    def _price(self) -> int:
        return int(10.0 ** (self.rng.random() * 6.0) * 100.0 + 0.5)

    def _next_base0_person_id(self, event_id: int) -> int:
        people = self.config.last_base0_person_id(event_id) + 1
        active = min(people, self.config.num_active_people)
        return people - active + self.rng.randrange(active + PERSON_ID_LEAD)

    def _next_base0_auction_id(self, event_id: int) -> int:
        last = self.config.last_base0_auction_id(event_id)
        low = max(last - self.config.num_in_flight_auctions, 0)
        return low + self.rng.randrange(last - low + 1 + AUCTION_ID_LEAD)

    # -- events ----------------------------------------------------------------------------------

    def _person(self, event_id: int, ts: int) -> str:
        rng = self.rng
        pid = self.config.last_base0_person_id(event_id) + FIRST_PERSON_ID
        name = f"{FIRST_NAMES[rng.randrange(len(FIRST_NAMES))]} {LAST_NAMES[rng.randrange(len(LAST_NAMES))]}"
        email = f"{self._string(7)}@{self._string(5)}.com"
        card = " ".join(f"{rng.randrange(10_000):04d}" for _ in range(4))
        city = US_CITIES[rng.randrange(len(US_CITIES))]
        state = US_STATES[rng.randrange(len(US_STATES))]
        extra = self._extra(8 + len(name) + len(email) + len(card) + len(city) + len(state), self.config.avg_person_byte_size)
        return f"{PERSON},{ts},{pid},{name},{email},{card},{city},{state},{extra},,,,,,,,,,,,,,,\n"

    def _auction(self, event_id: int, ts: int, event_number: int) -> str:
        c, rng = self.config, self.rng
        aid = c.last_base0_auction_id(event_id) + FIRST_AUCTION_ID
        if rng.randrange(c.hot_sellers_ratio) > 0:
            seller = (c.last_base0_person_id(event_id) // HOT_BATCH) * HOT_BATCH
        else:
            seller = self._next_base0_person_id(event_id)
        seller += FIRST_PERSON_ID
        category = FIRST_CATEGORY_ID + rng.randrange(NUM_CATEGORIES)
        initial_bid = self._price()
        # how long until num_in_flight_auctions more auctions have opened: the average length
        events_for_auctions = c.num_in_flight_auctions * c.total_proportion // c.auction_proportion
        horizon = c.timestamp(event_number + events_for_auctions) - ts
        expires = ts + 1 + rng.randrange(max(horizon * 2, 1))
        item = self._string(20)
        description = self._string(100)
        reserve = initial_bid + self._price()
        extra = self._extra(8 + len(item) + len(description) + 40, c.avg_auction_byte_size)
        return (f"{AUCTION},{ts},,,,,,,,{aid},{item},{description},{initial_bid},{reserve},{expires},{seller},{category},"
                f"{extra},,,,,,\n")

    def _bid(self, event_id: int, ts: int) -> str:
        c, rng = self.config, self.rng
        if rng.randrange(c.hot_auction_ratio) > 0:
            auction = (c.last_base0_auction_id(event_id) // HOT_BATCH) * HOT_BATCH
        else:
            auction = self._next_base0_auction_id(event_id)
        auction += FIRST_AUCTION_ID
        if rng.randrange(c.hot_bidders_ratio) > 0:  # the second person of the batch: hot bidders are not hot sellers
            bidder = (c.last_base0_person_id(event_id) // HOT_BATCH) * HOT_BATCH + 1
        else:
            bidder = self._next_base0_person_id(event_id)
        bidder += FIRST_PERSON_ID
        price = self._price()
        if rng.randrange(2) > 0:
            i = rng.randrange(len(HOT_CHANNELS))
            channel, url = HOT_CHANNELS[i], self._hot_urls[i]
        else:
            channel, url = self._channels[rng.randrange(CHANNELS_NUMBER)]
        extra = self._extra(32, c.avg_bid_byte_size)
        return f"{BID},{ts},,,,,,,,,,,,,,,,,{auction},{bidder},{price},{channel},{url},{extra}\n"

    def next_line(self) -> str:
        """The next event of the stream as a CSV line (with its newline)."""
        c = self.config
        event_number = c.adjusted_event_number(self.count)
        self.count += 1
        ts = c.timestamp(event_number)
        kind = c.kind(event_number)  # the first event id is 0: the id is the event number
        if kind == BID:
            return self._bid(event_number, ts)
        if kind == AUCTION:
            return self._auction(event_number, ts, event_number)
        return self._person(event_number, ts)

    def lines(self, events: int) -> list[str]:
        return [self.next_line() for _ in range(events)]


def _abs_bit_reversed(i: int) -> int:
    """|Integer.reverse(i)| of a 32-bit int: the channel id Nexmark appends to most channels' URLs."""
    r = int(f"{i & 0xFFFFFFFF:032b}"[::-1], 2)
    return abs(r - (1 << 32) if r >= 1 << 31 else r)


# -- files -------------------------------------------------------------------------------------------


def data_dir(events: int, files: int, seed: int, config: Config) -> Path:
    return (Path(tempfile.gettempdir()) / "millstream-bench"
            / f"nexmark-{events}-{files}-{seed}-{config.out_of_order_group_size}-{config.first_event_rate}")


def generate(events: int, files: int = 4, seed: int = 0, config: Config = Config(), directory: Path | None = None) -> list[str]:
    """Writes ``events`` events into ``files`` CSV files ``part-NNN.csv`` (stream order: file by
    file), each cut at a multiple of the out-of-order group so that no file reaches back into the
    previous one, and returns their paths. Generated once per (events, files, seed, config) under
    the temp dir (or into ``directory``); a ``_COMPLETE`` marker (hidden from Spark's file source by
    its leading ``_``) lists the files. Modification times increase file by file, so Spark's file
    stream source reads them in order."""
    if events < 1 or files < 1:
        raise ValueError(f"Nexmark: events and files must be positive, got {events} events in {files} files")
    directory = Path(directory) if directory is not None else data_dir(events, files, seed, config)
    marker = directory / "_COMPLETE"
    if marker.exists():
        return [str(directory / name) for name in marker.read_text().split()]
    shutil.rmtree(directory, ignore_errors=True)
    partial = directory.with_name(directory.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    group = config.out_of_order_group_size
    groups = -(-events // group)
    per_file = -(-groups // files) * group
    generator = Generator(config, seed)
    names = []
    mtime = time.time() - files
    for f in range(files):
        count = min(per_file, events - f * per_file)
        if count <= 0:
            break
        name = f"part-{f:03d}.csv"
        path = partial / name
        with open(path, "w", encoding="utf-8") as out:
            out.write("".join(generator.lines(count)))
        os.utime(path, (mtime + f, mtime + f))
        names.append(name)
    (partial / "_COMPLETE").write_text("\n".join(names) + "\n")
    partial.rename(directory)
    return [str(directory / name) for name in names]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Writes a Nexmark event file set (CSV) and prints its paths.")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-of-order-group", type=int, default=Config.out_of_order_group_size)
    a = parser.parse_args()
    started = time.perf_counter()
    paths = generate(a.events, a.files, a.seed, Config(out_of_order_group_size=a.out_of_order_group))
    print("\n".join(paths))
    print(f"{a.events:,} events in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
