"""Deterministic tokenizer test corpus (>= 2,000 strings): hand-written cases
plus generated mixes of scripts, emoji, code, numbers, whitespace, special-token
text, combining marks and unusual code points. No lone surrogates (the corpus
travels as UTF-8)."""
import random

HAND = [
    "", " ", "  ", "\n", "\r\n", "\t", "a", "Hello world!", "Hello, world. How are you?",
    "I'm sure they're fine, aren't they? We'll see; you'd know. It's 'quoted'.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG", "don't DON'T Don'T 've 'VE 'Ll",
    "  leading spaces", "trailing spaces   ", "multiple    inner     spaces", "tabs\tand\t\ttabs",
    "line1\nline2\n\nline4\n\n\n", "crlf\r\nline\r\n\r\n", "mixed\r\n\n\r\t \n end", "\n\n\n\n\n\n",
    "1234567890", "3.14159 2.71828 1e10 -42 +7 0x1F 1,000,000 12.50$", "٠١٢٣٤٥٦٧٨٩ ０１２３ ①②③ Ⅻ",
    "中文测试：你好，世界！这是一个句子。", "日本語のテキスト、カタカナとひらがな。漢字も。", "한국어 텍스트입니다. 안녕하세요!",
    "Русский текст: Привет, мир!", "Ελληνικά: Γειά σου Κόσμε", "עברית: שלום עולם", "العربية: مرحبا بالعالم",
    "हिन्दी: नमस्ते दुनिया", "ไทย: สวัสดีชาวโลก", "Tiếng Việt: Xin chào thế giới", "ქართული ენა", "አማርኛ",
    "Ελληνικά ΣΊΣΥΦΟΣ ς", "Türkçe İstanbul ıi", "Deutsch: Straße Größe ÄÖÜ ß ẞ", "français: œuvre, naïve, façade",
    "emoji 😀😃😄 👍 🎉", "👩‍👩‍👧‍👦 family", "👍🏻👍🏼👍🏽👍🏾👍🏿", "🏳️‍🌈 🏴‍☠️ 🇺🇸🇯🇵🇩🇪", "1️⃣ #️⃣ *️⃣", "👨🏽‍💻 🧑🏿‍🤝‍🧑🏻",
    "def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "#include <stdio.h>\nint main() { printf(\"%d\\n\", 42); }", "SELECT * FROM t WHERE id = 1;",
    "<div class=\"x\">Hello &amp; bye</div>", "{\"key\": [1, 2, {\"nested\": null}]}", "$ ls -la | grep foo > out.txt",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }", "x => x.map(y => y * 2).filter(Boolean)",
    "<|im_end|>", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<s>", "</s>", "<s>hello</s>",
    "text <s> middle </s> end", "<unk>", "<|begin_of_text|>Hello<|eot_id|>", "<|end_of_text|>",
    "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", "<｜begin▁of▁sentence｜>hi<｜end▁of▁sentence｜>",
    "<｜User｜>question<｜Assistant｜>answer", "<start_of_turn>user\nhi<end_of_turn>\n", "<bos><eos><pad>",
    "<unused0> <unused99> <mask> [multimodal]", "<tool_call>{\"name\": \"f\"}</tool_call>", "<think>\nhmm\n</think>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "<0x41><0xE4>", "▁ ▁▁ ▁hello", "<|im_end", "|im_end|>",
    "<<|im_end|>>", "<s><s></s></s>", "< s >", "<|reserved_special_token_5|>",
    "e\u0301 a\u0308 o\u0302 n\u0303", "\u1100\u1161\u11a8 \u1112\u1161\u11ab", "Å Å Å", "ﬁ ﬂ ﬀ ﬃ", "ＡＢＣ ａｂｃ ｶﾀｶﾅ",
    "𝐀𝐁𝐂 𝒜 𝔸 𝟘𝟙", "\ufeffBOM at start", "zero\u200bwidth\u200cjoin\u200d", "nbsp\u00a0here\u3000ideo",
    "nel\u0085line\u2028sep\u2029para", "\ufffd replacement \ufffd\ufffd", "private \ue000\uf8ff \U000f0000",
    "\U0010fffd noncharacter-ish \ufdd0", "ſ ſt K Å", "\x00 nul \x01\x02\x1f\x7f", "\u202eRTL override\u202c",
    "\\xff\\xfe invalid-looking bytes \\u00e9", "Ã©Ã¨ mojibake Ã¢â‚¬â„¢", "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
    "a" * 300, " " * 100, "\n" * 50, "ab" * 200 + "\n", "😀" * 50, "中" * 120, "1" * 100, "!" * 80, "-" * 120,
    "word " * 100, "\t\n \r\n \t" * 20, "The year 2024 had 366 days; 1/3 = 0.333…",
    "URL: https://example.com/path?q=1&r=two#frag", "email: someone@example.org", "C:\\Windows\\System32",
    "can't won't shouldn't y'all ma'am o'clock", "...?!!?,,;;::", "«quotes» „German“ “curly” ‘single’",
    "Price: €100, £50, ¥1000, ₹500, $5", "→ ← ↑ ↓ ⇒ ∀x∃y: x≤y ∑∫√∞", "©®™ §¶ †‡ •…",
]

WORDS = {
    "en": "the of and to in is that it was for on are as with his they at be this from have or by one had not".split(),
    "de": "der die und in den von zu das mit sich des auf für ist im dem nicht ein eine als auch Straße".split(),
    "fr": "le de un être et à il avoir ne je son que se qui ce dans en du elle au français été".split(),
    "es": "el la de que y a en un ser se no haber por con su para como estar tener niño".split(),
    "ru": "и в не на я быть он с что а по это она этот к но они мы как из".split(),
    "zh": "的 一 是 不 了 人 我 在 有 他 这 中 大 来 上 国 个 到 说 们 为 子 和 你 地 出 道 也 时 年".split(),
    "ja": "これ は 日本語 の 文章 です 。 カタカナ ひらがな 漢字 東京 大阪 ありがとう".split(),
    "ko": "이 그 저 것 수 등 들 및 에서 하다 있다 되다 한국어 서울".split(),
    "ar": "في من على إلى عن مع هذا هذه كان التي الذي".split(),
    "hi": "के में की है और से को का एक पर यह".split(),
    "code": ["def", "return", "if", "else:", "for", "i", "in", "range(10):", "x", "=", "+=", "==", "!=", "{", "}",
             "(", ")", "[", "]", "->", "=>", "::", "std::vector<int>", "self.x", "0x7f", "/* c */", "// note",
             "#", "\"str\"", "'c'", "`tick`", "&&", "||", "<<", ">>", "**", "++i", "null", "None", "True"],
}
EMOJI = ["😀", "😂", "🥲", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧", "❤️", "🏳️‍🌈", "🇫🇷", "✨", "🔥", "🤖", "🧑🏾‍🚀", "☕", "⭐",
         "1️⃣", "🫠", "🪿"]
SPECIAL = ["<|im_end|>", "<|im_start|>", "<s>", "</s>", "<unk>", "<|begin_of_text|>", "<|eot_id|>",
           "<|endoftext|>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<start_of_turn>",
           "<end_of_turn>", "<bos>", "<unused3>", "<tool_call>", "</tool_call>", "<think>", "<0x0A>", "▁", "<pad>",
           "<|fim_prefix|>", "<|python_tag|>", "<|finetune_right_pad_id|>"]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\u00a0", "\u3000", "\t\t", "    ", "\r"]
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0327", "\u0303", "\u20dd", "\u0323\u0302", "\u200d", "\ufe0f"]
UNUSUAL = ["\ufeff", "\u200b", "\u2028", "\u2029", "\u0085", "\ufffd", "\ue000", "\u00ad", "\u2060", "\u180e",
           "\U0001d400", "\U00020000", "\u212a", "\u017f", "\ufb01", "\u2163", "\u00b2", "\u0000", "\u001b", "\u007f"]


def _number(rng):
    k = rng.random()
    if k < 0.4:
        return str(rng.randrange(10 ** rng.randint(1, 12)))
    if k < 0.6:
        return f"{rng.uniform(-1e4, 1e4):.{rng.randint(0, 6)}f}"
    if k < 0.8:
        return f"{rng.randrange(10**7):,}"
    return rng.choice(["٣٤٥", "１２３", "²³", "½", "Ⅻ", "0.5e-3", "1_000"])


def _random_codepoints(rng, n):
    out = []
    while len(out) < n:
        r = rng.random()
        if r < 0.5:
            cp = rng.randrange(0x20, 0x3000)
        elif r < 0.8:
            cp = rng.randrange(0x3000, 0x10000)
        else:
            cp = rng.randrange(0x10000, 0x30000)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        out.append(chr(cp))
    return "".join(out)


def _mix(rng):
    parts = []
    for _ in range(rng.randint(1, 12)):
        k = rng.random()
        if k < 0.45:
            lang = rng.choice(list(WORDS))
            sep = "" if lang in ("zh", "ja") else " "
            parts.append(sep.join(rng.choice(WORDS[lang]) for _ in range(rng.randint(1, 8))))
        elif k < 0.55:
            parts.append(rng.choice(EMOJI) * rng.randint(1, 3))
        elif k < 0.65:
            parts.append(_number(rng))
        elif k < 0.75:
            parts.append(rng.choice(WHITESPACE) * rng.randint(1, 3))
        elif k < 0.82:
            parts.append(rng.choice(SPECIAL))
        elif k < 0.88:
            parts.append(rng.choice("aeiouxyzAEO中") + rng.choice(COMBINING))
        elif k < 0.93:
            parts.append(rng.choice(UNUSUAL))
        elif k < 0.97:
            parts.append(rng.choice(".,;:!?'\"()[]{}<>-_/\\|@#$%^&*~`+="))
        else:
            parts.append(rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", " n't"]))
        if rng.random() < 0.5:
            parts.append(rng.choice([" ", " ", "", "\n"]))
    s = "".join(parts)
    if rng.random() < 0.1:
        s = s.upper()
    return s


def build_corpus():
    rng = random.Random(20240601)
    corpus = list(HAND)
    for _ in range(1700):
        corpus.append(_mix(rng))
    for _ in range(300):
        corpus.append(_random_codepoints(rng, rng.randint(1, 30)))
    for _ in range(20):  # longer documents
        corpus.append("".join(_mix(rng) for _ in range(rng.randint(20, 60))))
    return corpus
