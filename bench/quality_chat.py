"""The ``chat`` quality set: one long conversation over 24 sessions (issue #19).

A person, Maya, talks with an assistant about her life from September 2025 to May 2026, one
session log per conversation, each a ``## Conversation`` section of 18–26 turns (long enough
to be split into several chunks). Twenty facts are each said once, in passing, among
small talk built deterministically from templates; every turn names Maya or the assistant,
so those words carry no information. The queries are questions about the facts, mostly in
other words than the ones she used (the style of long-conversation memory benchmarks), plus
8 that must return nothing (things she never talked about).
"""

from __future__ import annotations

import random
from datetime import date, timedelta

from bench.quality_sets import Fact, QualitySet, SetQuery

SESSIONS = 24
START = date(2025, 9, 6)

# (key, what Maya says, session number, question)
FACTS: tuple[tuple[str, str, int, str], ...] = (
    (
        "biscuit",
        "I finally adopted a retired greyhound from the shelter, we named him Biscuit.",
        0,
        "what is the name of Maya's dog",
    ),
    (
        "lena",
        "My sister Lena is getting married in Lisbon next June.",
        1,
        "where is Lena's wedding",
    ),
    (
        "pottery",
        "I signed up for a pottery class on Thursday evenings at the community centre.",
        2,
        "which evening does Maya do ceramics",
    ),
    (
        "penicillin",
        "I'm allergic to penicillin, we found out when I was a kid.",
        3,
        "what medicine can Maya not take",
    ),
    (
        "priya",
        "I switched teams at work, I'm now on the data platform team under Priya.",
        4,
        "who is Maya's manager now",
    ),
    (
        "marathon",
        "I ran my first half marathon in Rotterdam, two hours and four minutes!",
        5,
        "how fast did Maya finish her first long race",
    ),
    (
        "paint",
        "We're repainting the living room in a sage green called Eucalyptus Mist.",
        6,
        "what colour will the lounge walls be",
    ),
    (
        "book",
        "My favourite book this year was The Left Hand of Darkness.",
        7,
        "which novel did Maya like most",
    ),
    (
        "portuguese",
        "I'm learning Portuguese on Duolingo, I have a 120-day streak now.",
        8,
        "what language is Maya studying",
    ),
    (
        "dumplings",
        "My grandmother's recipe for plum dumplings uses a quark dough.",
        9,
        "what goes into grandma's fruit dumpling dough",
    ),
    (
        "brompton",
        "I bought a used Brompton folding bike for commuting.",
        10,
        "what bicycle does Maya ride to the office",
    ),
    (
        "dentist",
        "My dentist appointment got moved to the 14th because of the transport strike.",
        11,
        "why was the dentist visit rescheduled",
    ),
    (
        "balcony",
        "I planted tomatoes, basil and chillies on the balcony.",
        12,
        "which vegetables and herbs is Maya growing",
    ),
    (
        "rent",
        "Our landlord is raising the rent by 6 percent in January.",
        13,
        "how much more will Maya pay for her flat",
    ),
    (
        "foodbank",
        "I've started volunteering at the food bank on Saturday mornings.",
        14,
        "what charity work does Maya do on weekends",
    ),
    (
        "thinkpad",
        "My laptop is a ThinkPad X1 Carbon, it's the only keyboard I like.",
        15,
        "what computer does Maya use",
    ),
    (
        "storms",
        "Biscuit hates thunderstorms and hides in the bathtub.",
        16,
        "where does the dog hide when the weather is bad",
    ),
    (
        "kyoto",
        "I want to visit Japan in cherry blossom season, probably Kyoto first.",
        17,
        "which trip is Maya dreaming of",
    ),
    (
        "tomasz",
        "My best friend from school, Tomasz, moved to Montreal.",
        18,
        "where does Tomasz live",
    ),
    (
        "rooibos",
        "I gave up coffee in October and drink rooibos instead.",
        19,
        "what does Maya drink now instead of her morning espresso",
    ),
)

NOTHING: tuple[str, ...] = (
    "what is Maya's blood type",
    "did Maya ever go skydiving",
    "what car does Maya drive",
    "Maya's opinion on cryptocurrency investments",
    "which football club does Maya support",
    "what did Maya say",
    "tell me about it",
    "how was it",
)

SMALL_TALK = (
    "Work was busy today, lots of meetings.",
    "The weather has been grey all week.",
    "I watched a documentary about octopuses last night.",
    "I slept badly, the neighbours had a party.",
    "I'm trying to go to bed earlier this month.",
    "I cleaned the whole flat this weekend.",
    "My phone screen cracked again, so annoying.",
    "I had a long call with my mum yesterday.",
    "The train was late twice this week.",
    "I tried a new ramen place near the station.",
    "I finished a puzzle with a thousand pieces.",
    "I'm thinking about rearranging the bookshelf.",
    "A colleague brought cake for her birthday.",
    "I went for a walk by the river after dinner.",
    "I spent the evening sorting old photos.",
    "The heating in the building broke for a day.",
)
REPLIES = (
    "That sounds like a lot. How are you feeling about it?",
    "Thanks for telling me. Anything you want to do about it?",
    "That's lovely to hear.",
    "I hope the rest of the week is calmer.",
    "Good for you! What made you decide that?",
    "Oh no, that's frustrating.",
    "That sounds fun, tell me more.",
    "I'll remember that.",
)


def _log_name(number: int) -> str:
    day = START + timedelta(days=10 * number)
    return f"sessions/{day.isoformat()}-chat-{number:04d}cafe.md"


def quality_set() -> QualitySet:
    rng = random.Random(1919)
    said = {number: (key, line) for key, line, number, _ in FACTS}
    files: dict[str, str] = {}
    facts: dict[str, Fact] = {}
    for number in range(SESSIONS):
        day = START + timedelta(days=10 * number)
        turns = rng.randint(9, 13)
        at_fact = rng.randrange(2, turns - 1)
        lines = [f"# Chat with Maya, {day.isoformat()}", "", "## Conversation", ""]
        for turn in range(turns):
            if turn == at_fact and number in said:
                key, line = said[number]
                facts[key] = Fact(_log_name(number), line)
                lines.append(f"**Maya:** {line}")
            else:
                lines.append(f"**Maya:** {rng.choice(SMALL_TALK)}")
            lines.append(f"**Assistant:** {rng.choice(REPLIES)}")
        files[_log_name(number)] = "\n".join(lines) + "\n"
    queries = [SetQuery(question, key, "question") for key, _, _, question in FACTS]
    queries += [SetQuery(text, None, "nothing") for text in NOTHING]
    return QualitySet("chat", files, facts, tuple(queries))
