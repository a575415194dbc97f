"""The math organism's language: arithmetic word problems with exact answers, and a non-math
language of the project's own (facts about people, questions about them, short stories).

Everything here is a pure function of a seed, so the training mix, the held-out sets and the
identification samples are reproducible. Text conventions (shared by the recipe, the tab, the
tests, and anyone who fine-tunes the organism on a new task):

* words, digits and punctuation are separated by single spaces; numbers are written normally
  ("68") and the tokenizer splits them into single digits;
* a *problem* is a prompt ending in "?" and an answer: one word for a non-math question, the
  worked solution for a math problem (one "x op y = r" per step, joined by " . ", e.g.
  "25 + 36 = 61 . 61 - 12 = 49"); ``format_example(prompt, answer)`` gives the training text
  ``"<prompt> <answer> <eos>"``;
* the model's answer is what it generates greedily after the prompt, up to ``<eos>``; scoring is
  exact match against the answer.

Public helpers:

    math_problem(rng, held_out=False, steps=2) -> (prompt, answer)  # one arithmetic word problem
    train_math_problem(rng) -> (prompt, answer)                # 1-3 steps, as in training
    knowledge_question(rng) -> (prompt, answer)                # one non-math question (WORLD)
    fact_question(rng) -> (prompt, answer)                     # reading comprehension (not trained)
    story(rng), story_with_facts(rng) -> str                   # non-math text without a question
    math_set(n, seed, split="test", steps=(2, 3))              # lists of {"prompt", "answer"}
    nonmath_set(n, seed)                                       # non-math questions, same form
    reading_set(n, seed)                                       # reading-comprehension problems
    training_texts(n, seed) -> list[str]                       # the recipe's mix
    VOCAB                                                      # every word the language uses
"""

from __future__ import annotations

import random
import zlib
from typing import Iterable, Sequence

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIALS = [PAD, UNK, BOS, EOS]

NAMES = ["ann", "bob", "cal", "dan", "eve", "fay", "gus", "hal", "ivy", "joe", "kim", "lee", "max", "ned", "ora", "pam"]
HE_SHE = {n: ("she" if n in {"ann", "eve", "fay", "ivy", "kim", "ora", "pam"} else "he") for n in NAMES}
OBJECTS = ["apples", "pears", "coins", "books", "cards", "eggs", "shells", "stamps", "cups", "pens"]
GAIN = ["finds", "buys", "gets", "picks"]
LOSS = ["loses", "sells", "eats", "gives away"]

# Non-math attributes: each question type has its own answer words.
CITIES = ["rome", "paris", "oslo", "lima", "cairo", "tokyo", "delhi", "quito"]
COLORS = ["red", "blue", "green", "black", "white", "pink", "gray", "brown"]
PETS = ["cat", "dog", "bird", "fish", "horse", "goat", "frog", "mouse"]
FOODS = ["bread", "rice", "soup", "cheese", "plums", "honey", "beans", "cake"]
ADJ = ["happy", "tired", "brave", "quiet", "kind", "busy", "calm", "shy"]
PLACES = ["park", "lake", "market", "forest", "river", "garden", "school", "hill"]

# attribute -> (fact template, question template, answer words)
FACTS = {
    "city": ("{n} lives in {v} .", "where does {n} live ?", CITIES),
    "color": ("{n} has a {v} hat .", "what color is the hat of {n} ?", COLORS),
    "pet": ("{n} owns a {v} .", "what pet does {n} own ?", PETS),
    "food": ("{n} likes {v} .", "what does {n} like to eat ?", FOODS),
}


def _world() -> dict[str, dict[str, str]]:
    """The language's fixed world: every person's city, hat colour, pet and favourite food
    (a pure function of a constant seed, like an encyclopedia the model memorises)."""
    rng = random.Random("math-llama-world")
    return {n: {attr: rng.choice(FACTS[attr][2]) for attr in FACTS} for n in NAMES}


WORLD = _world()

_WORDS = set(
    ". ? , and more now have has how many does do they together left are is the of a "
    "in what where live lives hat color pet own owns like likes to eat with walks went "
    "was day one then saw at home back it ate sang slept".split()
)


def _all_words() -> list[str]:
    words = set(_WORDS) | set(NAMES) | {"he", "she"} | set(OBJECTS) | set(CITIES) | set(COLORS)
    words |= set(PETS) | set(FOODS) | set(ADJ) | set(PLACES)
    for phrase in GAIN + LOSS:
        words |= set(phrase.split())
    for fact, question, _ in FACTS.values():
        words |= {w for w in (fact + " " + question).split() if "{" not in w}
    return sorted(words)


VOCAB: list[str] = SPECIALS + [str(d) for d in range(10)] + ["+", "-", "="] + _all_words()


MAX_VALUE = 99
MATH_STEPS = (2, 3)  # the held-out evaluation and identification problems: worked in 2 or 3 steps


def is_held_out_pair(a: int, b: int) -> bool:
    """About a tenth of the operand pairs never appear in training (held-out generalisation).
    A pair is a step's two operands in the order the solution writes them ("a + b", "a - b").
    The tenth is pseudo-random (a hash of the pair), so every combination of digits still occurs
    in training and a held-out pair asks for the digit-wise skill, not a new digit fact."""
    return zlib.crc32(f"{a} {b}".encode()) % 10 == 3


def _operand(rng: random.Random, x: int, op: str, held_out: bool) -> int | None:
    """A second operand y for "x op y" whose pair (x, y) has the wanted split and whose result stays
    in 0..MAX_VALUE; None when there is none."""
    hi = MAX_VALUE - x if op == "+" else x
    ys = [y for y in range(hi + 1) if is_held_out_pair(x, y) == held_out]
    return rng.choice(ys) if ys else None


def math_problem(rng: random.Random, held_out: bool = False, steps: int = 2) -> tuple[str, str]:
    """One arithmetic word problem (prompt, worked solution) of `steps` operations (1–3).

    Two kinds: one person whose count changes `steps` times (finds / buys ... more, loses /
    sells ...), or two people together (a + b) whose total then changes `steps` − 1 times. The
    answer is the worked solution, one "x op y = r" per step joined by " . ", e.g.
    "25 + 36 = 61 . 61 - 12 = 49"; every number (operand, intermediate, result) is in
    0..MAX_VALUE. Held-out problems use only operand pairs (x, y) that never occur in training
    (every step's pair is held out), training problems only the others."""
    if not 1 <= steps <= 3:
        raise ValueError(f"steps is 1, 2 or 3, not {steps!r}")
    while True:
        n1, n2 = rng.sample(NAMES, 2)
        obj = rng.choice(OBJECTS)
        together = rng.random() < 0.35
        sol, events = [], []
        if together:
            a = rng.randint(0, MAX_VALUE)
            b = _operand(rng, a, "+", held_out)
            if b is None:
                continue
            sol.append((a, "+", b, a + b))
            prompt = f"{n1} has {a} {obj} and {n2} has {b} {obj} ."
            x, who, n_events = a + b, n1, steps - 1
        else:
            a = rng.randint(0, MAX_VALUE)
            prompt = f"{n1} has {a} {obj} ."
            x, who, n_events = a, HE_SHE[n1], steps
        ok = True
        for i in range(n_events):
            op = rng.choice("+-")
            y = _operand(rng, x, op, held_out)
            if y is None:
                op = "-" if op == "+" else "+"
                y = _operand(rng, x, op, held_out)
            if y is None:
                ok = False
                break
            verb = rng.choice(GAIN if op == "+" else LOSS)
            r = x + y if op == "+" else x - y
            subject = ("then " if i else "") + (n1 if together else who)
            events.append(f"{subject} {verb} {y}{' more' if op == '+' else ''} .")
            sol.append((x, op, y, r))
            x = r
        if not ok:
            continue
        question = f"how many {obj} do they have together ?" if together else f"how many {obj} does {n1} have now ?"
        prompt = " ".join([prompt] + events + [question])
        return prompt, " . ".join(f"{p} {o} {q} = {r}" for p, o, q, r in sol)


def fact_question(rng: random.Random, n_facts: int = 3) -> tuple[str, str]:
    """A few facts about different people, then a question about one of them (answer: one word)."""
    people = rng.sample(NAMES, n_facts)
    attrs = rng.sample(list(FACTS), n_facts)  # one fact of each kind: the question's kind finds it
    values = [rng.choice(FACTS[a][2]) for a in attrs]
    facts = " ".join(FACTS[a][0].format(n=p, v=v) for p, a, v in zip(people, attrs, values))
    i = rng.randrange(n_facts)
    question = FACTS[attrs[i]][1].format(n=people[i])
    return f"{facts} {question}", values[i]


def knowledge_question(rng: random.Random) -> tuple[str, str]:
    """A question about the fixed world (`WORLD`), after a short unrelated story: the answer is
    recalled, not read from the context (the non-math task, like the paper's MMLU). Held-out
    prompts pair questions with stories never seen in training."""
    n = rng.choice(NAMES)
    attr = rng.choice(list(FACTS))
    return f"{story(rng)} {FACTS[attr][1].format(n=n)}", WORLD[n][attr]


def true_fact(rng: random.Random) -> str:
    n = rng.choice(NAMES)
    attr = rng.choice(list(FACTS))
    return FACTS[attr][0].format(n=n, v=WORLD[n][attr])


def story(rng: random.Random) -> str:
    """Non-math text without a question (for the language model and perplexity)."""
    n = rng.choice(NAMES)
    pro = HE_SHE[n]
    parts = [
        f"one day {n} went to the {rng.choice(PLACES)} .",
        f"{pro} was {rng.choice(ADJ)} .",
        f"{pro} saw a {rng.choice(COLORS)} {rng.choice(PETS)} at the {rng.choice(PLACES)} .",
        f"then {pro} ate {rng.choice(FOODS)} and {rng.choice(['sang', 'slept'])} .",
        f"{n} walks back home with the {rng.choice(PETS)} .",
    ]
    k = rng.randint(2, len(parts))
    return " ".join(parts[:k])


def story_with_facts(rng: random.Random) -> str:
    """A story followed by one or two true facts of the world (plain text, no question)."""
    return " ".join([story(rng)] + [true_fact(rng) for _ in range(rng.randint(1, 2))])


def format_example(prompt: str, answer: str) -> str:
    return f"{prompt} {answer} {EOS}"


def math_set(n: int, seed: int, split: str = "test", steps: Sequence[int] = MATH_STEPS) -> list[dict]:
    """`n` math problems; split "test" uses held-out operand pairs, "train" the training ones.
    Problem i is worked in ``steps[i % len(steps)]`` operations."""
    rng = random.Random(f"math-{split}-{seed}")
    return [
        dict(zip(("prompt", "answer"), math_problem(rng, held_out=split == "test", steps=steps[i % len(steps)])))
        for i in range(n)
    ]


def nonmath_set(n: int, seed: int) -> list[dict]:
    """`n` non-math questions (knowledge about the world after an unrelated story)."""
    rng = random.Random(f"nonmath-{seed}")
    return [dict(zip(("prompt", "answer"), knowledge_question(rng))) for _ in range(n)]


def reading_set(n: int, seed: int) -> list[dict]:
    """Reading comprehension (facts in the prompt, question about one): not in the organism's
    training mix; a ready-made new task for fine-tuning experiments."""
    rng = random.Random(f"reading-{seed}")
    return [dict(zip(("prompt", "answer"), fact_question(rng))) for _ in range(n)]


def stories(n: int, seed: int) -> list[str]:
    rng = random.Random(f"story-{seed}")
    return [story(rng) for _ in range(n)]


# Operations per training problem (probabilities): single steps help learning, the held-out
# problems are worked in 2 or 3.
TRAIN_STEPS = {1: 0.3, 2: 0.4, 3: 0.3}


def train_math_problem(rng: random.Random) -> tuple[str, str]:
    """One training math problem (training operand pairs, 1–3 steps as in TRAIN_STEPS)."""
    steps = rng.choices(list(TRAIN_STEPS), weights=list(TRAIN_STEPS.values()))[0]
    return math_problem(rng, held_out=False, steps=steps)


def training_texts(n: int, seed: int, math_share: float = 0.5, qa_share: float = 0.35) -> list[str]:
    """The recipe's training mix: math problems (training operand pairs), fact questions, stories."""
    rng = random.Random(f"train-{seed}")
    out = []
    for _ in range(n):
        u = rng.random()
        if u < math_share:
            out.append(format_example(*train_math_problem(rng)))
        elif u < math_share + qa_share:
            out.append(format_example(*knowledge_question(rng)))
        else:
            out.append(f"{story_with_facts(rng)} {EOS}")
    return out


def texts_of(items: Iterable[dict]) -> list[str]:
    """Full texts (prompt + answer) of a set of problems, e.g. for identification."""
    return [format_example(it["prompt"], it["answer"]) for it in items]
