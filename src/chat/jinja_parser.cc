#include "chat/jinja_parser.h"

#include <cctype>
#include <set>

#include "chat/jinja_builtins.h"

namespace uc::chat::jinja {
namespace {

// ------------------------------------------------------------------ template lexing

struct TagToken {
  enum class Type { kText, kOutput, kStatement };
  Type type;
  std::string content;
  int line;
};

int CountNewlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string RstripAll(std::string_view s) {
  size_t end = s.size();
  while (end > 0 && IsSpace(s[end - 1])) --end;
  return std::string(s.substr(0, end));
}

// Jinja turns every newline sequence into "\n" and, without keep_trailing_newline, drops one
// final newline.
std::string NormalizeSource(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      out += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      out += text[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Index of the closing delimiter `close` (e.g. "%}") at or after `pos`, skipping string literals
// and bracketed expressions as Jinja's lexer does; npos if none.
size_t FindClose(const std::string& s, size_t pos, std::string_view close) {
  int depth = 0;
  while (pos < s.size()) {
    const char c = s[pos];
    if (c == '\'' || c == '"') {
      ++pos;
      while (pos < s.size() && s[pos] != c) pos += s[pos] == '\\' ? 2 : 1;
      ++pos;
      continue;
    }
    if (depth == 0) {
      if (s.compare(pos, close.size(), close) == 0) return pos;
      if (c == '-' && s.compare(pos + 1, close.size(), close) == 0) return pos;
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
    ++pos;
  }
  return std::string::npos;
}

std::vector<TagToken> LexTemplate(std::string_view text) {
  const std::string s = NormalizeSource(text);
  std::vector<TagToken> tokens;
  size_t pos = 0;
  int line = 1;
  bool line_starting = true;
  while (pos <= s.size()) {
    size_t open = s.find('{', pos);
    while (open != std::string::npos && open + 1 < s.size() && s[open + 1] != '{' &&
           s[open + 1] != '%' && s[open + 1] != '#') {
      open = s.find('{', open + 1);
    }
    if (open == std::string::npos || open + 1 >= s.size()) {
      if (pos < s.size()) tokens.push_back({TagToken::Type::kText, s.substr(pos), line});
      break;
    }
    std::string data = s.substr(pos, open - pos);
    const int data_line = line;
    line += CountNewlines(data);
    const char kind = s[open + 1];
    size_t inner = open + 2;
    const char modifier = inner < s.size() ? s[inner] : '\0';
    if (modifier == '-' || modifier == '+') ++inner;
    if (modifier == '-') {
      data = RstripAll(data);
    } else if (kind != '{' && modifier != '+') {  // lstrip_blocks
      const size_t l_pos = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
      if ((l_pos > 0 || line_starting) && l_pos < data.size() &&
          data.find_first_not_of(" \t", l_pos) == std::string::npos) {
        data.resize(l_pos);
      }
    }
    if (!data.empty()) tokens.push_back({TagToken::Type::kText, data, data_line});
    const std::string_view close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t end;
    if (kind == '#') {
      end = s.find("#}", inner);
      if (end != std::string::npos && end > inner && s[end - 1] == '-') --end;
    } else {
      end = FindClose(s, inner, close);
    }
    if (end == std::string::npos) {
      throw JinjaError(
          std::string("unclosed '{") + kind + "' tag (missing '" + std::string(close) + "')", line);
    }
    const bool strip_after = s[end] == '-';
    const std::string content = s.substr(inner, end - inner);
    if (kind != '#') {
      tokens.push_back(
          {kind == '{' ? TagToken::Type::kOutput : TagToken::Type::kStatement, content, line});
    }
    line += CountNewlines(s.substr(open, end - open));
    pos = end + (strip_after ? 1 : 0) + close.size();
    line_starting = false;
    if (strip_after) {
      while (pos < s.size() && IsSpace(s[pos])) {
        line_starting = s[pos] == '\n';
        line += s[pos] == '\n';
        ++pos;
      }
    } else if (kind != '{' && pos < s.size() && s[pos] == '\n') {  // trim_blocks
      ++pos;
      ++line;
      line_starting = true;
    }
    if (pos == s.size()) break;
  }
  return tokens;
}

// ------------------------------------------------------------------ expression tokens

struct Tok {
  enum class Type { kName, kString, kInt, kFloat, kOp, kEnd };
  Type type;
  std::string text;  // name, operator, or the decoded string
  int line;
  Value number;
};

// Python's unicode-escape decoding, as Jinja applies to string literals.
std::string Unescape(std::string_view raw, int line) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\' || i + 1 >= raw.size()) {
      out += raw[i];
      continue;
    }
    const char c = raw[++i];
    auto hex = [&](int digits) {
      if (i + digits >= raw.size()) {
        throw JinjaError("truncated \\" + std::string(1, c) + " escape in a string literal", line);
      }
      const std::string h(raw.substr(i + 1, digits));
      for (char d : h) {
        if (!std::isxdigit(static_cast<unsigned char>(d))) {
          throw JinjaError("bad \\" + std::string(1, c) + " escape in a string literal", line);
        }
      }
      i += digits;
      out += CodePointsToUtf8(std::u32string(1, static_cast<char32_t>(std::stoul(h, nullptr, 16))));
    };
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (c >= '0' && c <= '7') {
          int value = c - '0';
          for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7';
               ++k) {
            value = value * 8 + (raw[++i] - '0');
          }
          out += CodePointsToUtf8(std::u32string(1, static_cast<char32_t>(value)));
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

std::vector<Tok> TokenizeExpression(const std::string& s, int line) {
  static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                               "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                               "]",  "{",  "}",  ",",  ".",  ":",  "|", ";"};
  std::vector<Tok> toks;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (IsSpace(c)) {
      line += c == '\n';
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      toks.push_back({Tok::Type::kName, s.substr(i, j - i), line, {}});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      auto digits = [&] {
        while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      };
      digits();
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        ++j;
        digits();
        is_float = true;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          j = k;
          digits();
          is_float = true;
        }
      }
      std::string text;
      for (size_t k = i; k < j; ++k) {
        if (s[k] != '_') text += s[k];
      }
      Tok t{is_float ? Tok::Type::kFloat : Tok::Type::kInt, text, line, {}};
      try {
        t.number = is_float ? Value::Float(std::stod(text)) : Value::Int(std::stoll(text));
      } catch (const std::exception&) {
        throw JinjaError("number literal out of range: " + text, line);
      }
      toks.push_back(std::move(t));
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      size_t j = i + 1;
      while (j < s.size() && s[j] != c) j += s[j] == '\\' ? 2 : 1;
      if (j >= s.size()) throw JinjaError("unterminated string literal", line);
      const std::string raw = s.substr(i + 1, j - i - 1);
      toks.push_back({Tok::Type::kString, Unescape(raw, line), line, {}});
      line += CountNewlines(raw);
      i = j + 1;
      continue;
    }
    bool matched = false;
    for (const char* op : kOps) {
      const std::string_view o(op);
      if (s.compare(i, o.size(), o) == 0) {
        toks.push_back({Tok::Type::kOp, std::string(o), line, {}});
        i += o.size();
        matched = true;
        break;
      }
    }
    if (!matched) throw JinjaError("unexpected character '" + std::string(1, c) + "'", line);
  }
  toks.push_back({Tok::Type::kEnd, "", line, {}});
  return toks;
}

// ------------------------------------------------------------------ expressions

class ExprParser {
 public:
  ExprParser(const std::string& text, int line) : toks_(TokenizeExpression(text, line)) {}

  const Tok& Peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  bool AtEnd() const { return Peek().type == Tok::Type::kEnd; }
  bool IsOp(std::string_view op, size_t ahead = 0) const {
    return Peek(ahead).type == Tok::Type::kOp && Peek(ahead).text == op;
  }
  bool IsName(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == Tok::Type::kName && Peek(ahead).text == name;
  }
  Tok Next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  void Expect(std::string_view op) {
    if (!IsOp(op)) Fail("expected '" + std::string(op) + "'");
    Next();
  }
  std::string ExpectName() {
    if (Peek().type != Tok::Type::kName) Fail("expected a name");
    return Next().text;
  }
  void ExpectEnd() {
    if (!AtEnd()) Fail("unexpected '" + Describe(Peek()) + "'");
  }
  [[noreturn]] void Fail(const std::string& message) const {
    const Tok& t = Peek();
    throw JinjaError(message + (t.type == Tok::Type::kEnd ? " at the end of the tag" : ""), t.line);
  }
  static std::string Describe(const Tok& t) {
    return t.type == Tok::Type::kString ? "'" + t.text + "' (a string)" : t.text;
  }
  int line() const { return Peek().line; }

  // An expression, or a tuple when commas separate several (`{{ a, b }}`, `set x = 1, 2`).
  ExprPtr ParseTuple(bool with_condition = true) {
    const int line = Peek().line;
    ExprPtr first = ParseExpression(with_condition);
    if (!IsOp(",")) return first;
    auto tuple = std::make_unique<Expr>(Expr::Kind::kTuple, line);
    tuple->children.push_back(std::move(first));
    while (IsOp(",")) {
      Next();
      if (AtEnd() || IsName("if")) break;
      tuple->children.push_back(ParseExpression(with_condition));
    }
    return tuple;
  }

  ExprPtr ParseExpression(bool with_condition = true) {
    // Brackets and parentheses recurse through here; bound the depth so that hostile template
    // text cannot exhaust the stack.
    struct DepthGuard {
      explicit DepthGuard(ExprParser& p) : parser(p) {
        if (++parser.depth_ > kMaxDepth) parser.Fail("expression nested too deeply");
      }
      ~DepthGuard() { --parser.depth_; }
      ExprParser& parser;
    } guard(*this);
    if (!with_condition) return ParseOr();
    ExprPtr expr = ParseOr();
    while (IsName("if")) {
      auto cond = std::make_unique<Expr>(Expr::Kind::kCondition, Next().line);
      cond->children.push_back(ParseOr());
      cond->children.push_back(std::move(expr));
      if (IsName("else")) {
        Next();
        cond->children.push_back(ParseExpression());
      } else {
        cond->children.push_back(nullptr);
      }
      expr = std::move(cond);
    }
    return expr;
  }

  // Assignment targets of for/set: `x`, `a, b`, `(a, b)`.
  std::vector<std::string> ParseTargets() {
    std::vector<std::string> names;
    const bool parens = IsOp("(");
    if (parens) Next();
    names.push_back(ExpectName());
    while (IsOp(",")) {
      Next();
      names.push_back(ExpectName());
    }
    if (parens) Expect(")");
    return names;
  }

  void ParseCallArgs(Expr& call) {
    Expect("(");
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) Fail("unsupported construct '*args' / '**kwargs' in a call");
      if (Peek().type == Tok::Type::kName && IsOp("=", 1)) {
        std::string name = Next().text;
        Next();
        call.kwargs.emplace_back(std::move(name), ParseExpression());
      } else {
        if (!call.kwargs.empty()) Fail("positional argument after a keyword argument");
        call.children.push_back(ParseExpression());
      }
      if (!IsOp(",")) break;
      Next();
    }
    Expect(")");
  }

 private:
  // Operator chains nest the tree (and the evaluator's recursion) one level each.
  void CountOperator() {
    if (++operators_ > kMaxOperators) Fail("expression too long (over 1000 operators)");
  }

  ExprPtr Binary(Expr::Kind kind, std::string name, int line, ExprPtr a, ExprPtr b) {
    CountOperator();
    auto e = std::make_unique<Expr>(kind, line);
    e->name = std::move(name);
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      const int line = Next().line;
      left = Binary(Expr::Kind::kOr, "or", line, std::move(left), ParseAnd());
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      const int line = Next().line;
      left = Binary(Expr::Kind::kAnd, "and", line, std::move(left), ParseNot());
    }
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      CountOperator();
      auto e = std::make_unique<Expr>(Expr::Kind::kUnary, Next().line);
      e->name = "not";
      e->children.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    ExprPtr left = ParseMath1();
    while (true) {
      const int line = Peek().line;
      std::string op;
      if (Peek().type == Tok::Type::kOp &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
           Peek().text == "<=" || Peek().text == ">" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        return left;
      }
      left = Binary(Expr::Kind::kCompare, op, line, std::move(left), ParseMath1());
    }
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Tok op = Next();
      left = Binary(Expr::Kind::kBinary, op.text, op.line, std::move(left), ParseConcat());
    }
    return left;
  }

  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (IsOp("~")) {
      const Tok op = Next();
      left = Binary(Expr::Kind::kBinary, "~", op.line, std::move(left), ParseMath2());
    }
    return left;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Tok op = Next();
      left = Binary(Expr::Kind::kBinary, op.text, op.line, std::move(left), ParsePow());
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      const Tok op = Next();
      left = Binary(Expr::Kind::kBinary, "**", op.line, std::move(left), ParseUnary(true));
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      CountOperator();
      const Tok op = Next();
      node = std::make_unique<Expr>(Expr::Kind::kUnary, op.line);
      node->name = op.text;
      node->children.push_back(ParseUnary(false));
    } else {
      node = ParsePostfix(ParsePrimary());
    }
    return with_filter ? ParseFilterExpr(std::move(node)) : std::move(node);
  }

  ExprPtr ParsePrimary() {
    const Tok t = Peek();
    switch (t.type) {
      case Tok::Type::kName: {
        Next();
        auto e = std::make_unique<Expr>(Expr::Kind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case Tok::Type::kString: {
        std::string text;
        while (Peek().type == Tok::Type::kString) text += Next().text;
        auto e = std::make_unique<Expr>(Expr::Kind::kLiteral, t.line);
        e->literal = Value::String(std::move(text));
        return e;
      }
      case Tok::Type::kInt:
      case Tok::Type::kFloat: {
        Next();
        auto e = std::make_unique<Expr>(Expr::Kind::kLiteral, t.line);
        e->literal = t.number;
        return e;
      }
      case Tok::Type::kOp:
        if (t.text == "(") return ParseParenthesized();
        if (t.text == "[") return ParseList();
        if (t.text == "{") return ParseDict();
        break;
      case Tok::Type::kEnd:
        break;
    }
    if (t.type == Tok::Type::kEnd) Fail("expected an expression");
    Fail("unexpected '" + Describe(t) + "'");
  }

  ExprPtr ParseParenthesized() {
    const int line = Next().line;
    if (IsOp(")")) {
      Next();
      return std::make_unique<Expr>(Expr::Kind::kTuple, line);
    }
    ExprPtr first = ParseExpression();
    if (IsOp(")")) {
      Next();
      return first;
    }
    auto tuple = std::make_unique<Expr>(Expr::Kind::kTuple, line);
    tuple->children.push_back(std::move(first));
    while (IsOp(",")) {
      Next();
      if (IsOp(")")) break;
      tuple->children.push_back(ParseExpression());
    }
    Expect(")");
    return tuple;
  }

  ExprPtr ParseList() {
    auto list = std::make_unique<Expr>(Expr::Kind::kList, Next().line);
    while (!IsOp("]")) {
      list->children.push_back(ParseExpression());
      if (!IsOp(",")) break;
      Next();
    }
    Expect("]");
    return list;
  }

  ExprPtr ParseDict() {
    auto dict = std::make_unique<Expr>(Expr::Kind::kDict, Next().line);
    while (!IsOp("}")) {
      dict->children.push_back(ParseExpression());
      Expect(":");
      dict->children.push_back(ParseExpression());
      if (!IsOp(",")) break;
      Next();
    }
    Expect("}");
    return dict;
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const int line = Next().line;
        if (Peek().type == Tok::Type::kInt) {
          auto index = std::make_unique<Expr>(Expr::Kind::kLiteral, line);
          index->literal = Next().number;
          node = Binary(Expr::Kind::kGetItem, "", line, std::move(node), std::move(index));
          continue;
        }
        auto attr = std::make_unique<Expr>(Expr::Kind::kGetAttr, line);
        attr->name = ExpectName();
        attr->children.push_back(std::move(node));
        node = std::move(attr);
      } else if (IsOp("[")) {
        node = ParseSubscript(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr node) {
    const int line = Next().line;
    ExprPtr parts[3];
    int colons = 0;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        Next();
        if (++colons > 2) Fail("too many ':' in a slice");
        continue;
      }
      if (parts[colons] != nullptr) Fail("expected ']'");
      parts[colons] = ParseExpression();
      if (IsOp(",")) Fail("unsupported construct: a tuple index");
    }
    Expect("]");
    if (colons == 0) {
      if (parts[0] == nullptr) Fail("empty subscript");
      return Binary(Expr::Kind::kGetItem, "", line, std::move(node), std::move(parts[0]));
    }
    auto slice = std::make_unique<Expr>(Expr::Kind::kSlice, line);
    slice->children.push_back(std::move(node));
    for (ExprPtr& p : parts) slice->children.push_back(std::move(p));
    return slice;
  }

  ExprPtr ParseCall(ExprPtr node) {
    auto call = std::make_unique<Expr>(Expr::Kind::kCall, Peek().line);
    call->children.push_back(std::move(node));
    ParseCallArgs(*call);
    return call;
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        const int line = Next().line;
        auto filter = std::make_unique<Expr>(Expr::Kind::kFilter, line);
        filter->name = ExpectName();
        if (!Builtins::IsFilter(filter->name)) {
          throw JinjaError("unsupported filter '" + filter->name + "'", line);
        }
        filter->children.push_back(std::move(node));
        if (IsOp("(")) ParseCallArgs(*filter);
        node = std::move(filter);
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseTest(ExprPtr node) {
    const int line = Next().line;
    auto test = std::make_unique<Expr>(Expr::Kind::kTest, line);
    if (IsName("not")) {
      Next();
      test->negated = true;
    }
    test->name = ExpectName();
    if (!Builtins::IsTest(test->name)) {
      throw JinjaError("unsupported test '" + test->name + "'", line);
    }
    test->children.push_back(std::move(node));
    const Tok& t = Peek();
    if (IsOp("(")) {
      ParseCallArgs(*test);
    } else if ((t.type == Tok::Type::kName || t.type == Tok::Type::kString ||
                t.type == Tok::Type::kInt || t.type == Tok::Type::kFloat || IsOp("[") ||
                IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and") && !IsName("if")) {
      if (IsName("is")) Fail("tests cannot be chained with 'is'");
      test->children.push_back(ParsePostfix(ParsePrimary()));
    }
    return test;
  }

  static constexpr int kMaxDepth = 100;
  std::vector<Tok> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  static constexpr int kMaxOperators = 1000;
  int operators_ = 0;  // operators seen in this tag
};

// ------------------------------------------------------------------ statements

const std::set<std::string, std::less<>> kUnsupportedStatements = {
    "include",    "import",        "from",      "extends", "block",    "endblock", "call",
    "endcall",    "filter",        "endfilter", "with",    "endwith",  "raw",      "endraw",
    "autoescape", "endautoescape", "do",        "trans",   "endtrans", "pluralize"};

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<TagToken> tokens) : tokens_(std::move(tokens)) {}

  Body ParseAll() {
    std::string ended;
    Body body = ParseBody({}, &ended);
    return body;
  }

 private:
  // Parses nodes until a statement whose keyword is in `ends`; returns them and sets `*ended`
  // to that keyword (empty at the end of the template) and current_ to its parser.
  Body ParseBody(const std::set<std::string>& ends, std::string* ended, int opened_at = 0) {
    Body body;
    while (index_ < tokens_.size()) {
      const TagToken& tok = tokens_[index_++];
      if (tok.type == TagToken::Type::kText) {
        auto node = std::make_unique<Node>(Node::Kind::kText, tok.line);
        node->text = tok.content;
        body.push_back(std::move(node));
        continue;
      }
      if (tok.type == TagToken::Type::kOutput) {
        ExprParser p(tok.content, tok.line);
        auto node = std::make_unique<Node>(Node::Kind::kOutput, tok.line);
        node->expr = p.ParseTuple();
        p.ExpectEnd();
        body.push_back(std::move(node));
        continue;
      }
      current_ = std::make_unique<ExprParser>(tok.content, tok.line);
      const int line = tok.line;
      if (current_->Peek().type != Tok::Type::kName) {
        throw JinjaError("expected a statement keyword after '{%'", line);
      }
      const std::string keyword = current_->Next().text;
      if (ends.count(keyword) > 0) {
        *ended = keyword;
        return body;
      }
      if (keyword.rfind("end", 0) == 0 || keyword == "elif" || keyword == "else") {
        if (ends.empty())
          throw JinjaError("unexpected '{% " + keyword + " %}' (nothing to close)", line);
        throw JinjaError("unexpected '{% " + keyword + " %}': '{% " + CloserOf(ends).substr(3) +
                             " %}' on line " + std::to_string(opened_at) +
                             " is still open (expected {% " + CloserOf(ends) + " %})",
                         line);
      }
      body.push_back(ParseStatement(keyword, line));
    }
    if (!ends.empty()) {
      const std::string missing = CloserOf(ends);
      throw JinjaError(
          "'{% " + missing.substr(3) + " %}' is never closed (missing {% " + missing + " %})",
          opened_at);
    }
    *ended = "";
    return body;
  }

  // The end keyword among `ends` ("endif" of {elif, else, endif}).
  static std::string CloserOf(const std::set<std::string>& ends) {
    for (const std::string& e : ends) {
      if (e.rfind("end", 0) == 0) return e;
    }
    return *ends.begin();
  }

  NodePtr ParseStatement(const std::string& keyword, int line) {
    struct NestingGuard {
      NestingGuard(TemplateParser& p, int line) : parser(p) {
        if (++parser.nesting_ > kMaxNesting) throw JinjaError("statements nested too deeply", line);
      }
      ~NestingGuard() { --parser.nesting_; }
      TemplateParser& parser;
    } guard(*this, line);
    if (keyword == "if") return ParseIf(line);
    if (keyword == "for") return ParseFor(line);
    if (keyword == "set") return ParseSet(line);
    if (keyword == "macro") return ParseMacro(line);
    if (keyword == "break" || keyword == "continue") {
      current_->ExpectEnd();
      if (loop_depth_ == 0) throw JinjaError("'" + keyword + "' outside a for loop", line);
      return std::make_unique<Node>(keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue,
                                    line);
    }
    if (keyword == "generation") {
      current_->ExpectEnd();
      auto node = std::make_unique<Node>(Node::Kind::kBlock, line);
      std::string ended;
      node->body = ParseBody({"endgeneration"}, &ended, line);
      current_->ExpectEnd();
      return node;
    }
    if (kUnsupportedStatements.count(keyword) > 0) {
      throw JinjaError("unsupported construct '{% " + keyword + " %}'", line);
    }
    throw JinjaError("unknown statement '{% " + keyword + " %}'", line);
  }

  NodePtr ParseIf(int line) {
    auto node = std::make_unique<Node>(Node::Kind::kIf, line);
    ExprPtr cond = current_->ParseTuple();
    current_->ExpectEnd();
    while (true) {
      std::string ended;
      Body body = ParseBody({"elif", "else", "endif"}, &ended, line);
      node->branches.emplace_back(std::move(cond), std::move(body));
      if (ended == "elif") {
        cond = current_->ParseTuple();
        current_->ExpectEnd();
        continue;
      }
      current_->ExpectEnd();
      if (ended == "else") {
        node->else_body = ParseBody({"endif"}, &ended, line);
        current_->ExpectEnd();
      }
      return node;
    }
  }

  NodePtr ParseFor(int line) {
    auto node = std::make_unique<Node>(Node::Kind::kFor, line);
    node->targets = current_->ParseTargets();
    if (!current_->IsName("in")) current_->Fail("expected 'in' in the for statement");
    current_->Next();
    node->expr = current_->ParseTuple(/*with_condition=*/false);
    if (current_->IsName("if")) {
      current_->Next();
      node->filter = current_->ParseExpression();
    }
    if (current_->IsName("recursive")) {
      throw JinjaError("unsupported construct 'recursive' for loop", line);
    }
    current_->ExpectEnd();
    ++loop_depth_;
    std::string ended;
    node->body = ParseBody({"else", "endfor"}, &ended, line);
    --loop_depth_;
    current_->ExpectEnd();
    if (ended == "else") {
      node->else_body = ParseBody({"endfor"}, &ended, line);
      current_->ExpectEnd();
    }
    return node;
  }

  NodePtr ParseSet(int line) {
    std::vector<std::string> targets;
    std::string attr;
    targets.push_back(current_->ExpectName());
    if (current_->IsOp(".")) {
      current_->Next();
      attr = current_->ExpectName();
    } else {
      while (current_->IsOp(",")) {
        current_->Next();
        targets.push_back(current_->ExpectName());
      }
    }
    if (!current_->IsOp("=")) {
      if (!current_->AtEnd()) current_->Fail("expected '=' in the set statement");
      if (targets.size() != 1 || !attr.empty()) {
        throw JinjaError("a block set needs one plain name", line);
      }
      auto node = std::make_unique<Node>(Node::Kind::kSetBlock, line);
      node->targets = std::move(targets);
      std::string ended;
      node->body = ParseBody({"endset"}, &ended, line);
      current_->ExpectEnd();
      return node;
    }
    current_->Next();
    auto node = std::make_unique<Node>(Node::Kind::kSet, line);
    node->targets = std::move(targets);
    node->attr = std::move(attr);
    node->expr = current_->ParseTuple();
    current_->ExpectEnd();
    return node;
  }

  NodePtr ParseMacro(int line) {
    auto node = std::make_unique<Node>(Node::Kind::kMacro, line);
    node->name = current_->ExpectName();
    current_->Expect("(");
    while (!current_->IsOp(")")) {
      std::string param = current_->ExpectName();
      ExprPtr default_value;
      if (current_->IsOp("=")) {
        current_->Next();
        default_value = current_->ParseExpression();
      }
      node->params.emplace_back(std::move(param), std::move(default_value));
      if (!current_->IsOp(",")) break;
      current_->Next();
    }
    current_->Expect(")");
    current_->ExpectEnd();
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;
    std::string ended;
    node->body = ParseBody({"endmacro"}, &ended, line);
    loop_depth_ = saved_depth;
    if (!current_->AtEnd() && !current_->IsName(node->name)) current_->ExpectEnd();
    return node;
  }

  std::vector<TagToken> tokens_;
  size_t index_ = 0;
  static constexpr int kMaxNesting = 100;
  std::unique_ptr<ExprParser> current_;
  int loop_depth_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body ParseTemplate(std::string_view text) {
  TemplateParser parser(LexTemplate(text));
  return parser.ParseAll();
}

}  // namespace uc::chat::jinja
