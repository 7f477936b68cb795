"""What the local model reads in a message: its blocks, sentences, the details they carry, and how much a
sentence is worth remembering.

A message body is first cut into blocks (``blocks``): prose, tables (markdown pipes, columns aligned with
spaces or tabs, comma- or semicolon-separated rows), JSON, and code. Prose is cut into sentences
(``split_sentences``), which know abbreviations, list numbers, German ordinals ("am 18. November") and
Japanese full stops. A sentence's *details* (``details``) are what a note must not lose: numbers, amounts,
times and versions; identifiers (paths, handles, ``#channels``, ``kebab-case-names``, codes); quoted
wording; names (a capitalised word inside a sentence, or opening one when it is no common word); and firm
dates ("in ten days"). ``fact_weight`` adds up what makes a sentence a fact rather than chatter —
details, a statement about the speaker, a relation between people, health and diet, where something is
kept — against the words of small talk, and ``classify_user_sentence`` reads a sentence's form: a question
is asked as one (a question word or an inverted verb, not just a closing "?": "the code is 4471 now?"
states a value).

Everything here is pure text analysis; the Observer and Reflector that use it live in ``om_local``.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal

from om_core.adapters.models.om_local_dates import date_firmness, date_mentions, firm_date_mentioned
from om_core.domain.config import DEFAULT_TOKENIZER
from om_core.domain.tokens import make_tokenizer

# --- words -----------------------------------------------------------------------------------------------


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


WORD = re.compile(r"[^\W\d_][\w'’-]*|\d[\d,.:/-]*")
FILLER_WORDS = _word_set(
    """ok okay k kk thanks thank thx ty you lol lmao rofl haha hah hehe hi hello hey yo sure cool great
    nice awesome sounds sound good yes yeah yep yup no nope nah alright right got it bye see ya cheers
    perfect wow hmm um uh oh ah please np welcome morning evening afternoon night gotcha fine indeed
    exactly agreed that that's thats works will do much so very a lot of course certainly absolutely
    happy to help glad understood noted makes sense ugh meh oof argh phew tbh imo ngl idk fyi omg
    merci oui non d'accord super parfait bien bonjour salut bonsoir ça marche génial
    danke ja nein genau gut super prima klar alles bitte hallo servus toll
    ありがとう はい いいえ うん ええ なるほど 了解 了解です よろしく おはよう こんにちは すごい いいね
    そうですね"""
)
STOPWORDS = _word_set(
    """a an the and or but if then so to of in on at for with from by about as into over after before
    is are was were be been being am do does did have has had i me my mine we our us you your he she it
    they them their this that these those there here what which who whom whose when where why how can
    could would should will shall may might must not no yes just also very really please let lets let's
    i'm i've i'd i'll it's that's what's don't can't want need like know tell help make get give some any
    all more most other such only own same than too s t"""
)
# Words that open English sentences and are no names: a capitalised first word outside these (and the
# stop and filler words) is read as a name, so "Keiko owns the ingress controllers" keeps Keiko.
_COMMON_OPENERS = _word_set(
    """actually after again all almost also although always another anybody anyone anything anyway
    anywhere apparently around as basically because before being besides both but by certainly clearly
    could definitely did didn't do does doesn't don't each either else even eventually ever every
    everybody everyone everything everywhere except finally first for found from funny generally get
    go going gonna good got great guess had has have having he he's her here here's hers hey him his
    honestly hope hopefully how however i'd i'll i'm i've if in instead is isn't it it'll it's its just
    kind last later let like likely looks lots luckily made make many maybe meanwhile might more
    moreover most mostly much must my near neither never nevertheless next nobody none nothing now
    obviously of often oh on once one only or other others otherwise our out over perhaps personally
    plus probably quick quite rather really right seems she she's should since so some somebody someone
    something sometimes somewhere soon sorry still such suddenly sure thank thanks that that's the their
    then there there's these they they're thing things think this those though thus to today together
    tomorrow tonight too totally turns two unfortunately until up us usually very was wasn't we we'd
    we'll we're we've well were what what's whatever when whenever where wherever whether which while
    who whoever whole why will with without wow would yeah yes yesterday yet you you'd you'll you're
    you've your yours
    add ask book bring buy call cancel change check come do find fix give grab help keep leave let look
    make move need note order pick plan put read remember remind save say schedule see send set show
    start stop take tell try update use wait write
    dinner lunch breakfast work traffic weather coffee tea rain sunshine weekend morning evening night
    week month year everything life kids dog cat people family mom mum dad"""
)
_NOT_PROPER = frozenset({"I", "I'm", "I've", "I'll", "I'd", "User", "Assistant", "Tool", "OK", "Ok"})
_CAPITALISED = re.compile(r"\b[A-Z][\w'’&-]*")
# German capitalises every noun, so capitals name nothing there
GERMAN = re.compile(
    r"\b(?:ich|und|der|die|das|ist|nicht|wir|mit|bin|sind|auf|für|noch|schon|ein|eine|bei|beim|zum|uhr)\b",
    re.I,
)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff]")


def content_words(sentence: str) -> list[str]:
    return [w for w in WORD.findall(sentence) if w.lower().strip("'’") not in STOPWORDS]


def is_filler(sentence: str) -> bool:
    """Greetings, thanks and acknowledgements: nothing worth remembering."""
    words = [w.lower().strip("'’!?.,") for w in WORD.findall(sentence)]
    if _CJK.search(sentence):
        stripped = re.sub(r"[\s。、！？!?.,…ー〜]+", "", sentence)
        return not stripped or stripped in FILLER_WORDS or len(stripped) <= 2
    return not words or all(w in FILLER_WORDS or w in STOPWORDS for w in words)


def clip_words(sentence: str, limit: int) -> str:
    words = sentence.split()
    return sentence if len(words) <= limit else " ".join(words[:limit]).rstrip(",;:") + "…"


# --- sentences -------------------------------------------------------------------------------------------

_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "jr", "sr", "prof", "no", "approx", "ca",
     "bzw", "z.b", "usw", "nr", "str", "mme", "mlle", "env", "cf"}
)  # fmt: skip
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|(?<=[。！？])\s*")
_LIST_MARKER = re.compile(r"^\s*(?:[-*•·+]|\(?\d{1,2}[.)]|\(?[a-hA-H][.)]|[①-⑨])\s+")
_MONTH_WORD = re.compile(
    r"(?:jan|feb|mär|mar|apr|ma[iy]|jun|jul|aug|sep|o[ck]t|nov|de[cz]|janv|févr|fevr|avr|juil|août|"
    r"sept|déc)\w*",
    re.I,
)


def strip_list_marker(line: str) -> str:
    return _LIST_MARKER.sub("", line, count=1)


def split_sentences(text: str) -> list[str]:
    """Sentences, paragraph by paragraph (a list item is a paragraph of its own, without its marker)."""
    sentences: list[str] = []
    for paragraph in re.split(r"\n\s*", text):
        paragraph = strip_list_marker(paragraph)
        start = 0
        for match in _SENTENCE_END.finditer(paragraph):
            if match.end() >= len(paragraph):
                break
            head = paragraph[start : match.start()].rstrip(".!?\"')]")
            last_word = head.rsplit(maxsplit=1)[-1].lower() if head.split() else ""
            following = paragraph[match.end() :]
            if last_word in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha()):
                continue
            # "am 18. November", "der 3. Stock": a day or an ordinal, not the end of a sentence
            ordinal = last_word.isdigit() and len(last_word) <= 2 and paragraph[match.start() - 1] == "."
            if ordinal and (_MONTH_WORD.match(following) or following[:1].islower() or GERMAN.search(head)):
                continue
            sentences.append(paragraph[start : match.end()].strip())
            start = match.end()
        sentences.append(paragraph[start:].strip())
    return [s for s in sentences if s]


# --- blocks: prose, tables, JSON, code ---------------------------------------------------------------------


@dataclass(slots=True)
class Block:
    kind: Literal["prose", "table", "json", "code"]
    lines: list[str] = field(default_factory=list)
    # a table's header and rows, cell by cell
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    value: Any = None


_MARKDOWN_ROW = re.compile(r"^\s*\|?[^|\n]*(?:\|[^|\n]*)+\|?\s*$")
_MARKDOWN_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")
_ALIGNED_GAP = re.compile(r"\t+|\s{2,}")
_CODE_LINE = re.compile(
    r"^\s*(?:(?:#include|SELECT|INSERT|UPDATE|CREATE)\b.*|.*[;{}]\s*$|.*=>.*|"
    r"\$ .*|>>> .*|<[a-zA-Z/][^>]*>.*)$"
)
# a keyword opens a statement only with a statement's syntax after it: "from the email, word for word: …"
# and "if you can, …" are prose
_KEYWORD_LINE = re.compile(
    r"^\s*(?:def|class|import|from|return|if|elif|else|for|while|try|except|const|let|var|function|"
    r"public|private|package|func|fn|use)\b"
)
_STATEMENT_SYNTAX = re.compile(r"[(){}\[\]=]|:\s*$|\bimport\b|^\s*\w+\s*$")


def _markdown_cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") else body
    return [cell.strip() for cell in body.split("|")]


def _aligned_cells(line: str) -> list[str]:
    return [cell.strip() for cell in _ALIGNED_GAP.split(line.strip()) if cell.strip()]


def _separated_cells(line: str, separator: str) -> list[str]:
    return [cell.strip() for cell in line.split(separator)]


def _is_row_of(cells: list[str], width: int) -> bool:
    return len(cells) == width and width >= 2 and all(len(c.split()) <= 8 for c in cells)


def _header_like(cells: list[str]) -> bool:
    """A first row of column names: short words, none a number or an amount ("p99" is a name)."""
    return all(
        cell and len(cell.split()) <= 4 and not re.fullmatch(r"[€$£¥]?[\d.,:/%\s-]+\w{0,3}", cell)
        for cell in cells
    )


def _table_run(lines: Sequence[str], start: int) -> tuple[Block, int] | None:
    """The table that starts at ``lines[start]``, and the index after it, if one does."""
    first = lines[start]
    if _MARKDOWN_ROW.match(first) and "|" in first.strip().strip("|"):
        end = start
        while end < len(lines) and _MARKDOWN_ROW.match(lines[end]) and "|" in lines[end]:
            end += 1
        rows = [_markdown_cells(line) for line in lines[start:end] if not _MARKDOWN_RULE.match(line)]
        if len(rows) >= 2:
            return Block("table", list(lines[start:end]), rows[0], rows[1:]), end
    if _LIST_MARKER.match(first):
        return None
    for cells_of, minimum in (
        (_aligned_cells, 3),
        (lambda line: _separated_cells(line, ","), 3),
        (lambda line: _separated_cells(line, ";"), 3),
        (lambda line: _separated_cells(line, "\t"), 2),
    ):
        width = len(cells_of(first))
        if width < 2 or not _is_row_of(cells_of(first), width) or not _header_like(cells_of(first)):
            continue
        end = start + 1
        while (
            end < len(lines)
            and not _LIST_MARKER.match(lines[end])
            and _is_row_of(cells_of(lines[end]), width)
        ):
            end += 1
        if end - start >= minimum or (end - start >= 2 and width >= 3):
            rows = [cells_of(line) for line in lines[start:end]]
            # a sentence with two commas is no table of one row
            if any(cell.endswith((".", "?", "!")) for row in rows for cell in row[-1:]):
                continue
            return Block("table", list(lines[start:end]), rows[0], rows[1:]), end
    return None


def _json_value(text: str) -> Any:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict | list) and value else None


def _json_prefix(text: str) -> tuple[Any, int] | None:
    """A JSON document opening ``text`` (a payload pasted under a line saying what it is), and how many
    lines it takes."""
    try:
        value, end = json.JSONDecoder().raw_decode(text.lstrip())
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict | list) or not value:
        return None
    consumed = text[: end + len(text) - len(text.lstrip())]
    return value, consumed.count("\n") + 1


def looks_like_code(line: str) -> bool:
    """Program text: a statement, a block, a prompt or markup; not a line of data or measurements, which
    carry their own symbols (``p(95)=857ms``, ``| a | b |``)."""
    if _CODE_LINE.match(line) or (_KEYWORD_LINE.match(line) and _STATEMENT_SYNTAX.search(line)):
        return True
    symbols = sum(1 for ch in line if ch in "{}[]();<>$\\`")
    return len(line) > 0 and symbols / len(line) > 0.12


def blocks(text: str) -> list[Block]:
    """The blocks of a message body in order: fenced or bare JSON, tables, code, and prose between."""
    whole = _json_value(text)
    if whole is not None:
        return [Block("json", text.splitlines(), value=whole)]
    lines = text.split("\n")
    out: list[Block] = []
    index = 0

    def prose(line: str) -> None:
        if not out or out[-1].kind != "prose":
            out.append(Block("prose"))
        out[-1].lines.append(line)

    while index < len(lines):
        line = lines[index]
        if line.strip().startswith("```"):
            end = next(
                (i for i in range(index + 1, len(lines)) if lines[i].strip().startswith("```")), len(lines)
            )
            body = lines[index + 1 : end]
            value = _json_value("\n".join(body))
            inner = [b for b in blocks("\n".join(body)) if b.kind == "table"] if value is None else []
            if value is None and not inner and line.strip()[3:].strip().lower() in ("csv", "tsv"):
                separator = "\t" if "\t" in "".join(body) else ";" if ";" in "".join(body) else ","
                rows = [_separated_cells(b, separator) for b in body if b.strip()]
                inner = [Block("table", body, rows[0], rows[1:])] if len(rows) >= 2 else []
            if value is not None:
                out.append(Block("json", body, value=value))
            elif inner:
                out += inner
            else:
                out.append(Block("code", body))
            index = end + 1
            continue
        if line.strip().startswith(("{", "[")):
            embedded = _json_prefix("\n".join(lines[index:]))
            if embedded is not None:
                value, used = embedded
                out.append(Block("json", lines[index : index + used], value=value))
                index += used
                continue
        table = _table_run(lines, index) if line.strip() else None
        if table is not None:
            out.append(table[0])
            index = table[1]
            continue
        if line.strip() and looks_like_code(line):
            if not out or out[-1].kind != "code":
                out.append(Block("code"))
            out[-1].lines.append(line)
        else:
            prose(line)
        index += 1
    return out


def table_rows(block: Block, *, column_names: bool = True) -> list[str]:
    """A table as clauses, a row each: its first cell, then the others under their column names
    (``Kettle: Price 39.90, Qty 2``), or bare when the note names the columns once (``Kettle: 39.90, 2``)."""
    header = block.header if column_names else []
    out: list[str] = []
    for row in block.rows:
        cells = [c for c in row if c]
        if not cells:
            continue
        named = [
            f"{header[i]} {cell}" if i < len(header) and header[i] and header[i] != cell else cell
            for i, cell in enumerate(row)
            if i > 0 and cell
        ]
        out.append(f"{row[0]}: {', '.join(named)}" if row[0] and named else ", ".join(cells))
    return out


def json_leaves(value: Any, limit: int) -> list[str]:
    """A JSON value as ``path value`` clauses for its scalar leaves (an object in a list is a row)."""
    out: list[str] = []

    def walk(node: Any, path: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(node, dict):
            scalars = {k: v for k, v in node.items() if not isinstance(v, dict | list)}
            if path and scalars and len(scalars) == len(node) and len(scalars) <= 6:
                out.append(
                    f"{path}: " + ", ".join(f"{k} {v}" for k, v in scalars.items() if v not in (None, ""))
                )
                return
            for key, child in node.items():
                walk(child, f"{path}.{key}" if path else str(key))
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, f"{path}[{index}]" if path else f"[{index}]")
        elif node not in (None, ""):
            out.append(f"{path} {node}")

    walk(value, "")
    return out


# --- details ---------------------------------------------------------------------------------------------

_DETAIL_TOKEN = re.compile(
    r"[€$£¥]?\d(?:[\d,.:/-]*\d)?[%\w]*"  # numbers, amounts, times, dates, versions, measurements (857ms)
    r"|\b\w+(?:[_/.@#]\w+)+\b"  # identifiers, paths, handles, dotted names
    r"|(?<![\w#@])[#@][A-Za-z][\w-]+"  # channels and handles
    r"|\b[a-z0-9]+(?:-[a-z0-9]+){2,}\b"  # kebab-case names (inc-search-war)
    r"|\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z\d]{4,}\b"  # codes of letters and digits (saffron503, SK8090)
    r"|\"[^\"\n]{2,60}\"|“[^”\n]{2,60}”|„[^“\n]{2,60}“|«[^»\n]{2,60}»"  # quoted wording
)


# how a name goes on, as a common noun opening a sentence rarely does: a possessive, an apposition, a
# second name, the group it belongs to, or a verb of what people do and own
_NAME_FOLLOWERS = re.compile(
    r"^(?:'s\b|’s\b|,\s+(?:my|our|his|her|their|who|whose)\b|,\s+the\s+[\w-]+(?=,)|\s+and\s+[A-Z]|"
    r"\s+(?:on|from|at|in|of|with)\s+(?:the|our|my|his|her|their)\s+\w+\s+(?:team|group|side|desk|floor)\b|"
    r"\s+(?:from|at|in)\s+[\w-]+\s+(?:is|was|will|owns|runs|leads|handles|says|said|wants|has)\b|"
    r"\s+(?:owns|owned|lives|lived|works|worked|runs|ran|leads|led|handles|handled|manages|managed|"
    r"moved|joined|left|said|says|told|called|texted|emailed|wrote|wants|needs|prefers|likes|loves|hates|"
    r"covers|covered|takes|took|knows|studies|teaches|drives|plays|starts|started|arrives|arrived|"
    r"comes|came|flies|flew|booked|sent|asked|suggested|recommended|approved|signed|reports|maintains|"
    r"got|gets|has\s+(?:a|an|the|two|three)|is\s+(?:my|our|the\s+new|on\s+call|in\s+charge|responsible)))\b"
)


def _opening_name(sentence: str) -> str | None:
    """The sentence's first word when it reads as a name: capitalised, no common word, and followed as a
    name is — by a verb ("Keiko owns…", "Priya moved…"), an apposition ("Sanne, my best friend…"), a
    possessive, or a group it belongs to ("Keiko on the platform team…"). "Truth be told" is no name."""
    match = re.match(r"[\"'“(]*([A-Za-z][a-zà-ÿ'’-]+)\b", sentence.strip())
    if match is None:
        return None
    word = match.group(1).rstrip("'’s") if match.group(1).endswith(("'s", "’s")) else match.group(1)
    lower = word.lower()
    if lower in _COMMON_OPENERS or lower in STOPWORDS or lower in FILLER_WORDS or GERMAN.search(sentence):
        return None
    rest = sentence.strip()[match.end(1) - len(match.group(1)) + len(word) :]
    if word[0].isupper():
        return word if not common_word(word) or _NAME_FOLLOWERS.match(rest) else None
    # typed in lower case ("sanne will run the coding round"): no common word, followed as a name is
    if common_word(word) or len(word) < 3:
        return None
    return word if _NAME_FOLLOWERS.match(rest) or _AUXILIARY_FOLLOWER.match(rest) else None


_AUXILIARY_FOLLOWER = re.compile(r"^\s+(?:is|was|will|can|has|does|did|'s|’s)\b")


_VOCABULARY = make_tokenizer(DEFAULT_TOKENIZER)


@functools.lru_cache(maxsize=4096)
def common_word(word: str) -> bool:
    """Whether ``word`` is a common word of the language rather than a name: a tokenizer trained on much
    text holds the common ones whole, in lower case ("progress", "payment"), and spells most names in
    pieces ("keiko", "solveig")."""
    return all(_VOCABULARY.count(" " + part) == 1 for part in word.lower().split("-") if part)


def proper_nouns(text: str) -> list[str]:
    """Capitalised words inside a sentence; after a colon, where a new clause may start with a capital,
    only those that are no common word."""
    if GERMAN.search(text):
        return []
    out: list[str] = []
    for m in _CAPITALISED.finditer(text):
        before = text[: m.start()]
        if m.start() == 0 or re.search(r"[.!?]\s*$", before) or m.group(0) in _NOT_PROPER:
            continue
        if re.search(r":\s*$", before) and common_word(m.group(0)):
            continue
        out.append(m.group(0))
    return out


def details(sentence: str) -> list[str]:
    """Numbers, identifiers, quoted wording and names: what a note of the sentence must keep."""
    # "e.g" and "i.e" look like dotted names
    tokens = [
        m.group(0)
        for m in _DETAIL_TOKEN.finditer(sentence)
        if len(m.group(0)) >= 5 or m.group(0)[0].isdigit() or m.group(0)[0] in "#@€$£¥"
    ]
    opening = _opening_name(sentence)
    return tokens + ([opening] if opening else []) + proper_nouns(sentence)


# --- what makes a sentence a fact ------------------------------------------------------------------------

HEALTH_AND_DIET = re.compile(
    r"\b(?:allerg\w*|intoleran\w*|diabet\w*|vegetarian|vegan|gluten|lactose|kosher|halal|coeliac|celiac|"
    r"pregnan\w*|asthma\w*|epilep\w*|medication|insulin|inhaler|végétarien\w*|allergique|végane?)\b",
    re.I,
)
ADVERBS = (
    r"(?:really|still|usually|always|also|just|now|never|often|mostly|actually|definitely|generally|"
    r"currently|mainly|only|already|recently|finally|honestly)"
)
# "my X is …": something about the speaker, though often only how it is going ("my inbox is a mess")
_POSSESSION = re.compile(
    r"\b(?:my|our)\s+(?:[\w'-]+\s+){0,3}?(?:is|are|was|were|'s|called|named|lives?|works?|runs?|has|have)\b",
    re.I,
)
PERSONAL_CUE = re.compile(
    rf"""
    \b(?:my|our)\s+(?:[\w'-]+\s+){{0,3}}?(?:is|are|was|were|'s)\s+(?:called|named)\b
    | \bi(?:'m|\s+am)\s+(?:(?:a|an|so|very|quite|{ADVERBS})\s+)*
      (?:based|from|married|retired|moving|relocating|flying|travelling|traveling|staying|learning|left-handed)\b
    | \b(?:i|we)\s+(?:{ADVERBS}\s+)*
      (?:prefer|like|love|hate|dislike|enjoy|play|speak|drive|own|live|work|study|teach|support|follow|use|
         avoid|moved|bought|sold|switched|left|joined|started|quit|decided|booked|reserved|cancell?ed|
         canceled|renamed|upgraded|chose|picked|plan|intend)\b
    | \b(?:i've|i\s+have|we've|we\s+have)\s+been\s+
      (?:learning|playing|studying|living|using|training|taking)\b
    | \bi(?:'d|\s+would)\s+(?:{ADVERBS}\s+)?(?:rather|prefer)\b
    | \b(?:i|we)\s+(?:can't|cannot|don't|do\s+not|never)\s+(?:eat|have|drink|stand|use|fly|drive|take)\b
    | \b(?:please\s+(?:always|never|remember|note)|call\s+me|my\s+name|i\s+was\s+born|keep\s+in\s+mind|
         remember\s+that|don't\s+forget|note\s+that)\b
    | \b(?:let's\s+(?:go\s+with|use|pick|stick\s+with|switch\s+to|choose)|we'll\s+use|we\s+will\s+use|
         going\s+with|decision:|(?:i|we)\s+(?:have\s+|'ve\s+)?decided|we\s+chose|we\s+picked)
    """,
    re.I | re.X,
)
# who someone is to someone, and who is responsible for what
_RELATION = re.compile(
    r"\b(?:sister|brother|mother|father|mom|mum|dad|parents?|son|daughter|wife|husband|partner|"
    r"girlfriend|boyfriend|fianc[ée]e?|aunt|uncle|cousin|niece|nephew|grand\w+|friend|neighbou?r|"
    r"colleague|boss|manager|landlord|landlady|flatmate|roommate|housemate|teacher|doctor|dentist|vet|"
    r"lawyer|accountant|owner|lead|owns|in\s+charge|responsible|on[- ]call|handles|maintains|runs|team|"
    r"contact|assigned|reports\s+to)\b",
    re.I,
)
# a definite thing and where or when it is: "the spare key is under the blue pot", "bins go out Tuesdays"
_WHERE_OR_WHEN = re.compile(
    r"^(?:(?:the|our|my|his|her|their|each|every|all)\s+)?(?:[\w'-]+\s+){0,4}?"
    r"(?:is|are|was|were|will|'ll|lives?|sits?|stays?|goes|go|hangs?|belongs?|opens?|closes?|starts?|ends?|"
    r"runs?|comes?|leaves?|arrives?|needs?|must|has\s+to|have\s+to|should|gets?|costs?|takes?|happens?)\b"
    r"(?:\s+[\w'-]+){0,4}?\s+(?:under|in|inside|on|at|behind|beside|next\s+to|near|above|below|by|every|"
    r"each|until|before|after|from|to|with|through|via|weekly|daily|monthly|only)\b",
    re.I,
)
# a quantity in words: "two months", "three founders", "a dozen chairs"
_QUANTITY = re.compile(
    r"\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|"
    r"hundred|dozen|deux|trois|quatre|cinq|dix|zwei|drei|vier|fünf|zehn)\s+[a-zà-ÿ]+s?\b",
    re.I,
)
# how small talk sounds: feelings, reactions, the weather, screens
_CHATTER = re.compile(
    r"\b(?:lol|lmao|haha\w*|omg|wild|crazy|insane|awesome|amazing|boring|bored|tired|exhausted|lovely|"
    r"fun|funny|hilarious|ridiculous|weird|cute|yummy|delicious|gorgeous|weather|sunny|rainy|raining|"
    r"binge\w*|episode|season|show|movie|film|watched|watching|vibes?|mood|honestly|guess\s+what|"
    r"can't\s+believe|so\s+good|so\s+bad|not\s+bad|meh|ugh|awful|terrible|horrible|mess|saga|chaos|"
    r"nightmare|annoying|stressful|whatever|typical|great|wonderful|brilliant|act(?:ing|ed)?\s+up)\b",
    re.I,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|my|we|we're|we've|our|me|us)\b", re.I)


def fact_weight(sentence: str) -> int:
    """How much a sentence is worth remembering: 2 and more is a fact, less is chatter."""
    # the discourse words around it say nothing ("Plus the service on fire is…"); its capitals stay as typed
    sentence = LEADING_DISCOURSE.sub("", sentence.strip()).strip() or sentence
    found = details(sentence)
    numeric = any(d[:1].isdigit() or d[:1] in "€$£¥" for d in found)
    identifiers = [
        d for d in found if not d[:1].isdigit() and (re.search(r"[_/.@#-]", d) or re.search(r"[A-Za-z]\d", d))
    ]
    names = [d for d in found if d[:1].isupper() and d not in identifiers]
    quoted = any(d[:1] in '"“„«' for d in found)
    numeric = numeric or _QUANTITY.search(sentence) is not None
    weight = 2 * numeric + 2 * bool(identifiers) + quoted + min(2, len(set(names)))
    # a sentence about a named person states something of them
    if _opening_name(sentence):
        weight += 1
    weight += {"strong": 2, "weak": 1, None: 0}[date_firmness(sentence)]
    if PERSONAL_CUE.search(sentence):
        weight += 2
    elif _POSSESSION.search(sentence):
        weight += 1
    if HEALTH_AND_DIET.search(sentence):
        weight += 3
    if _RELATION.search(sentence):
        weight += 1
    if _WHERE_OR_WHEN.search(sentence.strip()):
        weight += 2
    if names and _FIRST_PERSON.search(sentence):
        weight += 1
    if _CJK.search(sentence) and re.search(r"(?:さん|様|くん|ちゃん|先生|[ァ-ヴー]{3,})", sentence):
        weight += 2
    if _LABELLED.match(sentence.strip()) or CORRECTION.search(sentence) or CHANGED.search(sentence):
        weight += 2
    weight += sum(
        1
        for found in (
            _PLAN.search(sentence),
            _DAY_OF_TRIP.search(sentence),
            _HABITUAL.search(sentence),
            _DEFINITION.match(sentence.strip()),
            _COMPOUND.search(sentence),
        )
        if found
    )
    weight -= min(2, len(_CHATTER.findall(sentence)))
    return weight


# "Day trip: Oaxaca.", "First up: behavioural stories.": a note of a label and its value
_LABELLED = re.compile(r"^[\w'’ -]{2,30}:\s+\S+(?:\s+\S+){0,5}[.!]?$")
# a value corrected: what a later statement of it replaces
CORRECTION = re.compile(
    r"\b(?:correction|change\s+of\s+plan|scratch\s+that|i\s+meant|"
    # "scratch what I said about the venue": what was said before, taken back
    r"(?:scratch|forget|ignore)\s+what\s+(?:i|we)\s+(?:said|told\s+you|wrote)|"
    r"(?:had|got)\s+[\w' ]{1,40}\s+wrong|"
    r"instead\s+of|no\s+longer|not\s+[\w' -]{1,30}\s+any\s?more|moved\s+again|changed\s+again|"
    r"rectificatif|plutôt|korrektur|stattdessen|doch\s+nicht|訂正|変更)\b",
    re.I,
)
# a definite thing said to have taken a new value: "the caterer got switched to Blue Fig", "our dentist has
# been changed to Dr. Okafor", "the failing job changed — it's nightly-etl now": whatever the value looks
# like (a lowercase dish, a colour), a change of something already named is what a note-taker keeps
CHANGED = re.compile(
    r"\b(?:the|our|my|his|her|their|this|that|\w+['’]s)\s+(?:[\w'’-]+\s+){0,4}?"
    r"(?:(?:has|have)\s+been\s+|had\s+been\s+|got\s+|was\s+|were\s+|is\s+|are\s+)?"
    r"(?:changed|switched|swapped|updated|moved|bumped|pushed|rescheduled)"
    r"(?:\s+(?:over\s+)?to\b|\s*[—–:,-]+\s*(?:it|they)(?:'s|’s|\s+is|\s+are|'re)\b)",
    re.I,
)
# what the speaker is doing, and when: "we're doing the night market walk on day two"
_PLAN = re.compile(r"\b(?:i'm|i\s+am|we're|we\s+are|i'll|we'll)\s+(?:\w+ing|going\s+to)\b", re.I)
# a schedule: "deploys go out Wednesdays", "every other Monday", "weekday mornings"
_HABITUAL = re.compile(
    r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)days\b|\bevery\s+(?:other\s+)?\w+day\b|"
    r"\bweekday\s+(?:mornings|evenings|nights)\b|\b(?:lundis|mardis|montags|dienstags|mittwochs|freitags)\b",
    re.I,
)


def names_a_day(word: str) -> bool:
    """Whether a detail is a day, one to come or one of a schedule ("Friday", "Saturdays")."""
    return bool(date_mentions(word, _ANY_DAY)) or _HABITUAL.fullmatch(word.strip()) is not None


_ANY_DAY = date(2001, 1, 1)
_DAY_OF_TRIP = re.compile(
    r"\bon\s+(?:the\s+)?(?:day\s+(?:\d+|one|two|three|four|five|six|seven)|\w+\s+day)\b", re.I
)
# "the service on fire is ledger-worker": a definite thing and what it is
_DEFINITION = re.compile(
    r"^(?:the|our|my)\s+(?:[\w'-]+\s+){1,5}?(?:is|are)\s+(?!a\b|an\b|so\b|very\b|really\b|just\b|pretty\b|"
    r"quite\b|too\b|not\b|still\b|kind\b|\w+ing\b)[\w-]+",
    re.I,
)
_COMPOUND = re.compile(r"\b[a-z]+-[a-z]+\b(?<!-on)(?<!-up)(?<!-in)")


_QUESTION_START = re.compile(
    r"^(?:what|what's|how|why|when|where|who|which|whose|is|are|was|were|do|does|did|can|could|would|"
    r"should|will|shall|may|have|has|am|any|anything|quick\s+question|"
    r"qu[e'’]|quoi|comment|pourquoi|quand|où|qui|quel\w*|est-ce|peux|pouvez|puis|"
    r"was|wie|warum|wann|wo|wer|welche\w*|kannst|können|könntest|gibt|ist|sind|hast|habt)\b",
    re.I,
)
# "I wonder if…", "any idea…", "do you know…": a question in a statement's clothes
_EMBEDDED_QUESTION = re.compile(
    r"^(?:i\s+wonder|any\s+idea|do\s+you\s+know|can\s+you\s+tell|tell\s+me|remind\s+me)\b", re.I
)
REQUEST_START = re.compile(
    r"^(please|pls|let's|lets|help|write|create|make|build|find|show|give|tell|explain|list|add|remove|"
    r"fix|update|change|plan|book|schedule|remind|send|draft|summari[sz]e|translate|check|compare|"
    r"suggest|recommend|calculate|generate|set|draft|can you|could you|would you|i need you|i want you)\b",
    re.I,
)
_DISCOURSE = re.compile(
    r"^(?:oh|ah|so|and|but|wait|hmm|ok|okay|well|right|also|btw|actually)[\s,!.—-]+", re.I
)


def is_question(sentence: str) -> bool:
    """Asked as a question: a question word or an inverted verb opens it, or it is a short "?" with nothing
    stated. "the gate code is 7731 now?" asks to confirm a value it states, and is read as a statement."""
    body = sentence.strip().rstrip("\"')")
    # "back to this: where do I…": a short lead before a colon says how the question comes up
    opening = re.sub(r"^[^:?]{1,25}:\s+", "", body)
    while (shorter := _DISCOURSE.sub("", opening)) != opening:
        opening = shorter
    if _CJK.search(body):
        return body.endswith(("？", "?", "か。", "か")) and not fact_weight(body) >= 2
    if _QUESTION_START.match(opening) or _EMBEDDED_QUESTION.match(opening):
        return body.endswith("?") or (len(opening.split()) <= 12 and not body.endswith("."))
    if body.endswith("?"):
        # a tag ("…, right?") or a bare "?" after a statement of a value still states the value
        return fact_weight(body) < 2
    return False


def classify_user_sentence(sentence: str) -> Literal["fact", "question", "request", "statement", "filler"]:
    """Facts carry details or say something lasting about the user (``fact_weight``); statements that do
    neither are chatter and are not remembered."""
    if is_filler(sentence):
        return "filler"
    if is_question(sentence):
        return "question"
    if fact_weight(sentence) >= 2:
        return "fact"
    if REQUEST_START.match(sentence):
        return "request"
    return "statement"


# --- trimming a sentence to what it says -------------------------------------------------------------------

LEADING_DISCOURSE = re.compile(
    r"^(?:(?:by the way|btw|oh|and|also|anyway|so|well|ok|okay|right|hmm|just so you know|for context|"
    r"for the record|for what it's worth|fyi|heads\s+up|before i forget|quick note|one more thing|"
    r"random thing,? but|"
    r"(?:sorry,? )?(?:asking|to ask) again|again|in case it's relevant|i should mention(?: that)?|"
    r"something to remember|i never said|not going to lie|honestly|to be fair|i mean|funny enough|"
    r"the thing is|truth be told|sorry|noted|got it|understood|sure|of course|great|perfect|wait|"
    r"oh wait|ah|ahh|um|uh|plus|meant to say(?: earlier)?)\b"
    r"\s*[,:;.!—–-]*\s*)+",
    re.I,
)
_TRAILING_TAIL = re.compile(
    r"(?:\s*[,;—–-]\s*(?:by the way|if that matters|if that's (?:fine|ok|okay)|if that helps|"
    r"just so you know|"
    r"in case (?:you need it|it matters)|anyway|though|honestly|lol|haha|sadly|if (?:the|a) form needs it|"
    r"not sure if (?:that|it) matters))+\s*(?=[.!?]?$)",
    re.I,
)
CLAUSE_SEPARATOR = re.compile(
    r"(,\s+|;\s+|\s+[-–—]\s+|\s+(?:and|but|so|because|which|although|though|while|whereas)\s+)"
)
_APPOSITION = re.compile(
    r"^(?:my|our|his|her|their|the|a|an|your)\s+|^(?:who|whose)\b|\b(?:since|from)\s+\w+$", re.I
)
_SUBJECT_START = re.compile(
    r"^(?:i|i'm|i've|i'd|i'll|we|we're|you|he|she|it|they|my|our|his|her|their|its|the|this|that|these|"
    r"those|there)\b",
    re.I,
)


def trimmed(sentence: str) -> str:
    """The sentence without the discourse words around what it says."""
    body = LEADING_DISCOURSE.sub("", sentence.strip()).strip()
    body = _TRAILING_TAIL.sub("", body).strip()
    return (body[:1].upper() + body[1:]) if body else sentence.strip()


def _clause_counts(clause: str, first: bool) -> bool:
    # a clause other than the first starts mid-sentence, where a capital marks a name
    return bool(
        details(clause if first else " " + clause)
        or PERSONAL_CUE.search(clause)
        or HEALTH_AND_DIET.search(clause)
        or firm_date_mentioned(clause)
    )


def essential(sentence: str, limit: int) -> str:
    """A long sentence cut to the clauses that carry details or a personal fact, then to ``limit`` words.

    The subject stays with them: the opening clause when a kept clause lacks a subject of its own
    ("Sanne, my best friend since uni, just moved to Trondheim"), and an apposition next to a kept name
    ("…, my best friend since uni, …"), so a note never loses who it is about.
    """
    if len(sentence.split()) <= limit:
        return sentence
    pieces = CLAUSE_SEPARATOR.split(sentence)
    clauses, separators = pieces[0::2], pieces[1::2]
    keep = {i for i, clause in enumerate(clauses) if _clause_counts(clause, i == 0)}
    if not keep:
        return clip_words(sentence, limit)
    later = sorted(i for i in keep if i > 0)
    # the opening clause is the subject when the kept clause has none, or when it is a name on its own
    if (
        0 not in keep
        and later
        and (not _SUBJECT_START.match(clauses[later[0]].strip()) or len(clauses[0].split()) <= 3)
    ):
        keep.add(0)
    for index in sorted(keep):
        for neighbour in (index - 1, index + 1):
            named = proper_nouns(" " + clauses[index]) or _opening_name(clauses[index]) or index == 0
            if (
                named
                and 0 <= neighbour < len(clauses)
                and neighbour not in keep
                and _APPOSITION.search(clauses[neighbour].strip())
            ):
                keep.add(neighbour)
    ordered = sorted(keep)
    out = clauses[ordered[0]]
    for previous, index in itertools.pairwise(ordered):
        out += (separators[index - 1] if index == previous + 1 else ", ") + clauses[index]
    return clip_words(out.strip().rstrip(",;"), limit)


# --- first person to third --------------------------------------------------------------------------------

_IRREGULAR_PAST = _word_set(
    """was had got made took left bought sold went came saw met told said thought kept found paid lost ran
    drove flew grew knew wrote read put set cut quit spent sent built felt heard held slept woke began became
    did could would should might must may can will shall"""
)
_THIRD_PERSON = {"am": "is", "'m": "is", "have": "has", "'ve": "has", "do": "does", "go": "goes",
                 "don't": "doesn't", "haven't": "hasn't", "'ll": "will", "'d": "would"}  # fmt: skip


def _conjugate(verb: str) -> str:
    lower = verb.lower()
    if lower in _THIRD_PERSON:
        return _THIRD_PERSON[lower]
    if lower in _IRREGULAR_PAST or lower.endswith(("ed", "n't")) or not lower.isalpha():
        return verb
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if len(lower) > 2 and lower.endswith("y") and lower[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


_FIRST_PERSON_VERB = re.compile(rf"\b[Ii](?:['’](m|ve|ll|d)\b|\s+(?:({ADVERBS})\s+)?([A-Za-z'’]+))")


def third_person(text: str) -> str:
    """What a user said about themselves, as a line about the user: ``I live in Porto`` → ``User lives in
    Porto``, ``my sister`` → ``user's sister``. Names, numbers and the rest of the wording stay as written."""

    def subject(match: re.Match[str]) -> str:
        contraction, adverb, verb = match.groups()
        if contraction is not None:
            return "user " + _THIRD_PERSON["'" + contraction]
        if verb.lower() in ("and", "or", "but", "so", "to", "too"):
            return "user " + verb
        return " ".join(["user", *([adverb] if adverb else []), _conjugate(verb)])

    if GERMAN.search(text) or re.search(r"\b(?:je|j'|nous|mon|ma|mes)\b", text, re.I):
        return text[:1].upper() + text[1:]
    out = re.sub(r"\b(?:you can )?call me\b", "user goes by", text, flags=re.I)
    out = _FIRST_PERSON_VERB.sub(subject, out)
    out = re.sub(r"\b[Mm]y\b", "user's", out)
    out = re.sub(r"\b(?:me|myself)\b", "user", out)
    out = re.sub(r"\b(?:user|User) (?:user|User)\b", "user", out)
    return out[:1].upper() + out[1:] if out else out


def assistant_line(sentence: str) -> str:
    """What the assistant said, as a line about it and the user."""
    out = re.sub(r"\b[Ii](?:'ll| will)\b", "will", sentence)
    out = re.sub(r"\b[Ii](?:'m| am) going to\b", "is going to", out)
    out = re.sub(r"\b[Ii](?:'ve| have)\b", "has", out)
    out = re.sub(r"\b[Ii](?:'d| would)\b", "would", out)
    out = re.sub(r"\byour\b", "user's", out)
    out = re.sub(r"\byou\b", "user", out)
    return out.rstrip(".")


# --- a proposal and the reply that takes it up ------------------------------------------------------------

# a recommendation, or an offer to do something
# a recommendation in the assistant's own voice
_RECOMMENDS = re.compile(
    r"\b(?:recommend\w*|suggest\w*|best\s+(?:fit|option|match|pick)|my\s+(?:pick|choice|"
    r"favou?rite)|i'?d\s+(?:go\s+with|pick|choose|take|book)|top\s+pick|"
    r"je\s+(?:recommande|conseille|propose)|ich\s+(?:empfehle|schlage)|おすすめ|お勧め)\b",
    re.I,
)
# words that praise a thing: a recommendation when the user asked to choose, else as often a tip
# ("a short thank-you note still stands out")
_PRAISES = re.compile(
    r"\b(?:ideal|would\s+be\s+(?:best|perfect|ideal)|works\s+best|fits\s+best|go\s+for|stands\s+out|"
    r"makes\s+the\s+most\s+sense|(?:safest|best|smartest)\s+(?:choice|bet|option|one))\b",
    re.I,
)
# a user turn asking to choose: what the assistant answers it with is a proposal
ASKS_TO_CHOOSE = re.compile(
    r"\b(?:which|choose|chose|pick|decide|prioriti[sz]e|should\s+(?:i|we)|any\s+thoughts|recommend|"
    r"suggest|better|go\s+with|options?|lequel|laquelle|choisir|welche[nrs]?|wählen|どれ|どちら)\b",
    re.I,
)


_OFFERS = re.compile(
    r"^(?:how\s+about|what\s+about|would|shall\s+i|should\s+i|do\s+you\s+want|want\s+me\s+to|"
    r"can\s+i|could\s+i|i\s+can|i\s+could|we\s+could|you\s+could|why\s+not|maybe|perhaps|or|"
    r"que\s+dites-vous|et\s+si|voulez-vous|veux-tu|soll\s+ich|wie\s+wäre|möchtest\s+du|wollen\s+wir)\b",
    re.I,
)


@dataclass(frozen=True, slots=True)
class Proposal:
    """What an assistant message put to the user: its options in order, and the one a plain yes takes
    (``default``): the question the message ends on, else the option it recommends; None when a yes
    cannot tell which of several options it means."""

    options: tuple[str, ...]
    default: int | None


def _option_text(line: str) -> str:
    body = strip_list_marker(line).strip()
    body = re.sub(r"^\*\*(.+?)\*\*", r"\1", body)
    return body.rstrip(".")


# a value put as a question: "How about a roast?", "Would the 9:15 work?"
_VALUE_OFFER = re.compile(r"^(?:how\s+about|what\s+about|would\s+.+\s+work\b|et\s+si|wie\s+wäre)", re.I)


def _recommends(sentence: str, asked_to_choose: bool) -> bool:
    return bool(
        _RECOMMENDS.search(sentence) or (_PRAISES.search(sentence) and (asked_to_choose or details(sentence)))
    )


def _offers(sentence: str, asked_to_choose: bool) -> bool:
    """A sentence that puts a value to the user: it recommends one or asks about one, or offers something
    it names ("Want me to go into more detail?" names nothing to remember)."""
    if _recommends(sentence, asked_to_choose) or _VALUE_OFFER.match(trimmed(sentence)):
        return True
    asks = sentence.rstrip(" \"')").endswith("?")
    return bool(details(sentence)) and bool(_OFFERS.match(trimmed(sentence)) or asks)


def _short_option(item: str) -> bool:
    """An option named in a few words, whatever note follows it ("ING (branch near the office)",
    "three weeks — less overhead"); a tip is a sentence."""
    head = re.split(r"\s+[—–-]\s+|:\s|\s*\(", item, maxsplit=1)[0]
    return len(head.split()) <= 5 and not item.rstrip().endswith(".")


def _enumeration(sentence: str) -> list[str]:
    """The alternatives a sentence lists ("yoga on Tuesdays (easy), swimming twice a week (easy) or a
    walk"), each with its note; none unless it lists three or more, the last after "or"."""
    body = sentence.strip().rstrip(".?!")
    plain = re.sub(r"\([^()]*\)", "", body)
    if not re.search(r",[^,]+\bor\b", plain):
        return []
    parts = re.split(r",\s+(?:or\s+)?|\s+or\s+", body)
    parts = [p.strip() for p in parts if p.strip()]
    if len(parts) < 3 or any(len(re.sub(r"\([^()]*\)", "", p).split()) > 6 for p in parts):
        return []
    return parts


def proposal_of(text: str, asked_to_choose: bool = False) -> Proposal | None:
    """The options an assistant message offers: list items or table rows when it has several, else the
    sentences that recommend, offer or ask about something concrete (a question that names a value is a
    proposal: "How about the 06:20 from Schiphol?"), split at "or" when one sentence offers two."""
    items: list[str] = []
    for block in blocks(text):
        if block.kind == "table":
            items += table_rows(block)
        elif block.kind == "prose":
            items += [_option_text(line) for line in block.lines if _LIST_MARKER.match(line) and line.strip()]
    sentences = [s for s in split_sentences(text) if not is_filler(s) and not _LIST_MARKER.match(s)]
    # a list of tips is no choice: options name what they offer, or are short
    items = [item for item in items if details(item) or _short_option(item)]
    if len(items) < 2:
        enumerated = [_enumeration(s) for s in sentences]
        items = next((e for e in enumerated if len(e) >= 3), items)
    if len(items) >= 2:
        recommending = [s for s in sentences if _recommends(s, True)]
        named = [
            i
            for i, item in enumerate(items)
            for s in recommending
            if any(d in s for d in details(item)[:2] if not d[:1].isdigit() or len(d) >= 3)
        ]
        return Proposal(tuple(items), named[0] if named else None)
    offered = [s for s in sentences if _offers(s, asked_to_choose)]
    if not offered:
        return None
    if len(offered) == 1:
        alternatives = [
            a.strip() for a in re.split(r",?\s+or\s+(?:the\s+)?", offered[0].rstrip("?.")) if a.strip()
        ]
        if len(alternatives) >= 2 and all(details(" " + a) for a in alternatives[1:]):
            return Proposal(tuple(alternatives), None)
    options = tuple(s.rstrip(" ?.") for s in offered)
    if offered[-1] == sentences[-1] and offered[-1].rstrip(" \"')").endswith("?"):
        return Proposal(options, len(options) - 1)
    recommended = next((i for i, s in enumerate(offered) if _recommends(s, asked_to_choose)), None)
    return Proposal(options, recommended if recommended is not None else len(options) - 1)


_ORDINALS: dict[str, int] = {
    "first": 0, "1st": 0, "second": 1, "2nd": 1, "third": 2, "3rd": 2, "fourth": 3, "4th": 3,
    "fifth": 4, "5th": 4, "last": -1, "latter": -1, "former": 0,
    "premier": 0, "première": 0, "deuxième": 1, "seconde": 1, "troisième": 2,
    "quatrième": 3, "dernier": -1, "dernière": -1,
    "erste": 0, "ersten": 0, "erster": 0, "erstes": 0, "zweite": 1, "zweiten": 1, "zweiter": 1,
    "zweites": 1, "dritte": 2, "dritten": 2, "dritter": 2, "drittes": 2, "vierte": 3, "letzte": -1,
    "letzten": -1, "letzter": -1, "letztes": -1,
}  # fmt: skip
_ORDINAL_CHOICE = re.compile(
    r"\b(?:the|option|le|la|l'|die|der|das|den)?\s*(?P<word>" + "|".join(_ORDINALS) + r")\b"
    r"|\b(?:option|number|no\.?|nr\.?|choice|#)\s*(?P<number>\d|[a-e])\b"
    r"|(?P<ja>[1-9一二三四五]|最初|最後)(?:つ目|番目|番|の)",
    re.I,
)
_COMPARATIVE_CHOICE = re.compile(
    r"\b(?P<adjective>cheap(?:er|est)|less\s+expensive|(?:more\s+)?expensive|pricier|earl(?:ier|iest)|"
    r"lat(?:er|est)|moins\s+cher|günstiger(?:e|en)?|billiger(?:e|en)?|früher(?:e|en)?|spätere?n?)\b",
    re.I,
)
_DEMONSTRATIVE = re.compile(
    r"\b(?:that|this|the)\s+one\b|\bthat(?:'s|\s+is)\s+(?:it|the\s+one)\b|\bthat\s+works\b|"
    r"\bcelui-(?:ci|là)|\bcelle-(?:ci|là)|\bdiese[nrs]?\b|\bdas\s+da\b|\bそれ|\bこれ",
    re.I,
)
_AFFIRMATIVE = re.compile(
    r"^(?:yes|yeah|yep|yup|yess+|sure|ok|okay|perfect|great|sounds\s+(?:good|great|perfect)|deal|agreed|"
    r"go\s+for\s+it|go\s+ahead|book\s+it|do\s+it|let'?s\s+do\s+(?:it|that)|let'?s\s+go\s+with|"
    r"works\s+for\s+me|that\s+works|love\s+it|absolutely|definitely|please\s+do|exactly|correct|"
    r"oui|d'accord|parfait|volontiers|ça\s+marche|allez|ja|genau|gerne|passt|einverstanden|klingt\s+gut|"
    r"super|はい|ええ|うん|お願い|それで|いいね|いいです)",
    re.I,
)
_REJECTION = re.compile(
    r"^(?:no|nope|nah|not|neither|none|non|nein|いいえ|いや)\b|\bneither\b|\bnone\s+of", re.I
)


@dataclass(frozen=True, slots=True)
class Choice:
    """A reply that takes up a proposal: the option picked (``index``, -1 for the last; None for the one
    the proposal recommends or its only one), or a rejection."""

    index: int | None
    rejected: bool = False


def _amount(text: str) -> float | None:
    found = re.search(
        r"[€$£¥]\s?(\d[\d,.]*)|(\d[\d,.]*)\s?(?:€|eur|euros?|usd|dollars?|chf|£|kr)\b", text, re.I
    )
    if found is None:
        return None
    return float((found.group(1) or found.group(2)).replace(",", ""))


def _clock(text: str) -> int | None:
    found = re.search(r"\b(\d{1,2}):(\d{2})\b", text)
    return int(found.group(1)) * 60 + int(found.group(2)) if found else None


def reply_choice(reply: str, proposal: Proposal) -> Choice | None:
    """How a user's reply takes up ``proposal``, when it does: an ordinal ("the second one", "la
    deuxième", "die zweite", "2つ目"), a comparison ("the cheaper one", "the earlier one"), a pointer
    ("that one"), or a short yes. Anything longer than a short answer is the user's own say."""
    first = split_sentences(reply)[:1]
    if not first:
        return None
    head = first[0]
    short = len(head.split()) <= 10 or (_CJK.search(head) is not None and len(head) <= 25)
    if not short:
        return None
    ordinal = _ORDINAL_CHOICE.search(head)
    if ordinal is not None:
        if ordinal["word"]:
            index = _ORDINALS[ordinal["word"].lower()]
        elif ordinal["number"]:
            number = ordinal["number"].lower()
            index = int(number) - 1 if number.isdigit() else ord(number) - ord("a")
        else:
            ja = ordinal["ja"]
            index = {"最初": 0, "最後": -1}.get(
                ja, "一二三四五".find(ja) if ja in "一二三四五" else int(ja) - 1
            )
        if -len(proposal.options) <= index < len(proposal.options):
            return Choice(index)
    comparative = _COMPARATIVE_CHOICE.search(head)
    if comparative is not None and len(proposal.options) >= 2:
        word = comparative["adjective"].lower()
        cheap = word.startswith(("cheap", "less", "moins", "günst", "bill"))
        measure = _amount if cheap or "expens" in word or "pric" in word else _clock
        values = [(measure(option), i) for i, option in enumerate(proposal.options)]
        known = [(v, i) for v, i in values if v is not None]
        if len(known) >= 2:
            low = cheap or word.startswith(("earl", "früh"))
            return Choice(min(known)[1] if low else max(known)[1])
    rejected = _REJECTION.search(head) is not None
    if rejected:
        return Choice(None, rejected=True)
    if _DEMONSTRATIVE.search(head) or _AFFIRMATIVE.match(head.strip(" \"'“")):
        return Choice(None)
    return None


_OFFER_LEAD = re.compile(
    r"^(?:(?:great|ok|okay|sure|so|then|alternatively|otherwise|also)[,!]?\s+)*"
    r"(?:how\s+about|what\s+about|would\s+you\s+(?:like|prefer)(?:\s+me\s+to)?|shall\s+i|should\s+i|"
    r"do\s+you\s+want(?:\s+me\s+to)?|want\s+me\s+to|i\s+can|i\s+could|we\s+could|you\s+could|"
    r"i'?d\s+(?:suggest|recommend|go\s+with|pick)|i\s+(?:suggest|recommend)|my\s+(?:pick|suggestion)\s+is|"
    r"looking\s+at\s+everything,|would|"
    r"the\s+best\s+(?:fit|option|choice|bet)\s+is|why\s+not|maybe|perhaps)\s+",
    re.I,
)


# what a recommendation says around its value: "Based on what you've told me, X is the one I'd pick"
_OFFER_FRAME = re.compile(
    r"^(?:based\s+on\s+[^,]{3,40},\s*|(?:alright|okay|ok|so|then|in\s+that\s+case)[,:;.!]?\s*(?:[—–-]\s*)?)+",
    re.I,
)
_OFFER_TAIL = re.compile(
    r"\s+(?:is|would\s+be)\s+the\s+one\s+(?:i'?d|i\s+would)\s+\w+|\s*[—–-]\s*it(?:\s+has\s+the\s+best|'s\s+the)\b.*$|"
    r":\s+it\s+has\s+the\s+best\b.*$|\s+(?:stands\s+out|makes\s+the\s+most\s+sense)\b.*$|\s+work\b(?=[^,]*$)",
    re.I,
)


def offered_value(option: str) -> str:
    """An option without the words that offer it: "How about booking the 06:20?" → "booking the 06:20"."""
    body = _OFFER_TAIL.sub("", _OFFER_LEAD.sub("", _OFFER_FRAME.sub("", option.strip()))).rstrip(" ?.")
    return body[:1].upper() + body[1:] if body else option


def chosen_option(proposal: Proposal, choice: Choice) -> str | None:
    """The option a choice names: the one picked, else the proposal's default."""
    if choice.rejected:
        return None
    index = choice.index if choice.index is not None else proposal.default
    return None if index is None else proposal.options[index]
