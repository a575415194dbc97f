"""The math organism's language: arithmetic word problems with exact answers, and a non-math
language of the project's own (facts about people, questions about them, short stories).

Everything here is a pure function of a seed, so the training mix, the held-out sets and the
identification samples are reproducible. Text conventions (shared by the recipe, the tab, the
tests, and anyone who fine-tunes the organism on a new task):

* words, digits and punctuation are separated by single spaces; numbers are written normally
  ("68") and the tokenizer splits them into single digits;
* a *problem* is a prompt ending in "?" and an answer of one word or one number;
  ``format_example(prompt, answer)`` gives the training text ``"<prompt> <answer> <eos>"``;
* the model's answer is what it generates greedily after the prompt, up to ``<eos>``; scoring is
  exact match against the answer.

Public helpers:

    math_problem(rng, held_out=False) -> (prompt, answer)      # one arithmetic word problem
    knowledge_question(rng) -> (prompt, answer)                # one non-math question (WORLD)
    fact_question(rng) -> (prompt, answer)                     # reading comprehension (not trained)
    story(rng), story_with_facts(rng) -> str                   # non-math text without a question
    math_set(n, seed, split="test") / nonmath_set(n, seed)     # lists of {"prompt", "answer"}
    reading_set(n, seed)                                       # reading-comprehension problems
    training_texts(n, seed) -> list[str]                       # the recipe's mix
    VOCAB                                                      # every word the language uses
"""
from __future__ import annotations

import random
from typing import Iterable

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIALS = [PAD, UNK, BOS, EOS]

NAMES = ["ann", "bob", "cal", "dan", "eve", "fay", "gus", "hal", "ivy", "joe", "kim", "lee",
         "max", "ned", "ora", "pam"]
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

MAX_OPERAND = 99


def _world() -> dict[str, dict[str, str]]:
    """The language's fixed world: every person's city, hat colour, pet and favourite food
    (a pure function of a constant seed, like an encyclopedia the model memorises)."""
    rng = random.Random("math-llama-world")
    return {n: {attr: rng.choice(FACTS[attr][2]) for attr in FACTS} for n in NAMES}


WORLD = _world()

_WORDS = set(". ? , and more now have has how many does do they together left are is the of a "
             "in what where live lives hat color pet own owns like likes to eat with walks went "
             "was day one then saw at home back it ate sang slept".split())


def _all_words() -> list[str]:
    words = set(_WORDS) | set(NAMES) | {"he", "she"} | set(OBJECTS) | set(CITIES) | set(COLORS)
    words |= set(PETS) | set(FOODS) | set(ADJ) | set(PLACES)
    for phrase in GAIN + LOSS:
        words |= set(phrase.split())
    for fact, question, _ in FACTS.values():
        words |= {w for w in (fact + " " + question).split() if "{" not in w}
    return sorted(words)


VOCAB: list[str] = SPECIALS + [str(d) for d in range(10)] + _all_words()


def is_held_out_pair(a: int, b: int) -> bool:
    """About a tenth of the operand pairs never appear in training (held-out generalisation)."""
    return (a * 7 + b * 13) % 10 == 3


def _pair(rng: random.Random, held_out: bool, lo: int = 0, hi: int = MAX_OPERAND) -> tuple[int, int]:
    while True:
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        if is_held_out_pair(a, b) == held_out:
            return a, b


def math_problem(rng: random.Random, held_out: bool = False) -> tuple[str, str]:
    """One arithmetic word problem (prompt, answer). Three kinds: gain (a + b), loss (a − b),
    two people together (a + b). Operands 0–99; held-out problems use operand pairs that never
    occur in training."""
    n1, n2 = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    kind = rng.randrange(3)
    a, b = _pair(rng, held_out)
    if kind == 0:
        verb = rng.choice(GAIN)
        prompt = f"{n1} has {a} {obj} . {HE_SHE[n1]} {verb} {b} more . how many {obj} does {n1} have now ?"
        ans = a + b
    elif kind == 1:
        a, b = max(a, b), min(a, b)
        verb = rng.choice(LOSS)
        prompt = f"{n1} has {a} {obj} . {HE_SHE[n1]} {verb} {b} . how many {obj} are left ?"
        ans = a - b
    else:
        prompt = f"{n1} has {a} {obj} and {n2} has {b} {obj} . how many {obj} do they have together ?"
        ans = a + b
    return prompt, str(ans)


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
    parts = [f"one day {n} went to the {rng.choice(PLACES)} .",
             f"{pro} was {rng.choice(ADJ)} .",
             f"{pro} saw a {rng.choice(COLORS)} {rng.choice(PETS)} at the {rng.choice(PLACES)} .",
             f"then {pro} ate {rng.choice(FOODS)} and {rng.choice(['sang', 'slept'])} .",
             f"{n} walks back home with the {rng.choice(PETS)} ."]
    k = rng.randint(2, len(parts))
    return " ".join(parts[:k])


def story_with_facts(rng: random.Random) -> str:
    """A story followed by one or two true facts of the world (plain text, no question)."""
    return " ".join([story(rng)] + [true_fact(rng) for _ in range(rng.randint(1, 2))])


def format_example(prompt: str, answer: str) -> str:
    return f"{prompt} {answer} {EOS}"


def math_set(n: int, seed: int, split: str = "test") -> list[dict]:
    """`n` math problems; split "test" uses held-out operand pairs, "train" the training ones."""
    rng = random.Random(f"math-{split}-{seed}")
    return [dict(zip(("prompt", "answer"), math_problem(rng, held_out=split == "test")))
            for _ in range(n)]


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


def training_texts(n: int, seed: int, math_share: float = 0.5, qa_share: float = 0.35) -> list[str]:
    """The recipe's training mix: math problems (training operand pairs), fact questions, stories."""
    rng = random.Random(f"train-{seed}")
    out = []
    for _ in range(n):
        u = rng.random()
        if u < math_share:
            out.append(format_example(*math_problem(rng)))
        elif u < math_share + qa_share:
            out.append(format_example(*knowledge_question(rng)))
        else:
            out.append(f"{story_with_facts(rng)} {EOS}")
    return out


def texts_of(items: Iterable[dict]) -> list[str]:
    """Full texts (prompt + answer) of a set of problems, e.g. for identification."""
    return [format_example(it["prompt"], it["answer"]) for it in items]
