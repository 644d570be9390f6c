#include "chat/jinja.h"

#include <cmath>
#include <unordered_map>

#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_parser.h"

namespace uc::chat::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

[[noreturn]] void ThrowUndefined(const Value& v, const std::string& what) {
  if (!v.undefined_name().empty()) throw JinjaError("'" + v.undefined_name() + "' is undefined");
  throw JinjaError(what + " of an undefined value");
}

[[noreturn]] void ThrowOperands(const std::string& op, const Value& a, const Value& b) {
  throw JinjaError("unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" +
                   b.TypeName() + "'");
}

// Python's floor division and modulo on integers.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python slice bounds: indices into a sequence of `size` items.
std::vector<size_t> SliceIndices(int64_t size, const Value& start_v, const Value& stop_v,
                                 const Value& step_v) {
  auto get = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) {
      throw JinjaError(std::string("slice ") + what + " must be an integer, got " + v.TypeName());
    }
    return v.as_int();
  };
  const int64_t step = get(step_v, "step").value_or(1);
  if (step == 0) throw JinjaError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v.has_value()) return dflt;
    int64_t i = *v < 0 ? *v + size : *v;
    if (step > 0) return std::clamp<int64_t>(i, 0, size);
    return std::clamp<int64_t>(i, -1, size - 1);
  };
  const int64_t start = clamp(get(start_v, "start"), step > 0 ? 0 : size - 1);
  const int64_t stop = clamp(get(stop_v, "stop"), step > 0 ? size : -1);
  std::vector<size_t> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.push_back(static_cast<size_t>(i));
    if (__builtin_add_overflow(i, step, &i)) break;  // past either end of the sequence
  }
  return out;
}

class Evaluator {
 public:
  Evaluator(const std::vector<std::pair<std::string, Value>>& variables,
            std::chrono::system_clock::time_point now, const RenderLimits& limits)
      : limits_(limits) {
    frames_.emplace_back();
    for (auto& [name, value] : Builtins::Globals(now)) frames_[0][name] = value;
    frames_.emplace_back();
    for (const auto& [name, value] : variables) frames_[1][name] = value;
  }

  std::string Run(const Body& body) {
    std::string out;
    Exec(body, out);
    return out;
  }

 private:
  using Frame = std::unordered_map<std::string, Value>;

  Value Lookup(const std::string& name) const {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value::Undefined(name);
  }

  Flow Exec(const Body& body, std::string& out) {
    for (const NodePtr& node : body) {
      const Flow flow = ExecNode(*node, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  // One unit of the step budget.
  void Step() {
    if (++steps_ > limits_.max_steps) {
      throw BudgetError("the template ran past its budget of " + std::to_string(limits_.max_steps) +
                        " steps (an unbounded loop?)");
    }
  }

  void CheckOutput(const std::string& out) const {
    if (static_cast<int64_t>(out.size()) > limits_.max_output_bytes) {
      throw BudgetError("the rendered text grew past its budget of " +
                        std::to_string(limits_.max_output_bytes) + " bytes");
    }
  }

  // A value within the size budgets, returned as is.
  Value Sized(Value v) const {
    if (v.is_string() && static_cast<int64_t>(v.as_string().size()) > limits_.max_output_bytes) {
      throw BudgetError("a string grew past its budget of " +
                        std::to_string(limits_.max_output_bytes) + " bytes");
    }
    if (v.is_list() && static_cast<int64_t>(v.as_list().size()) > limits_.max_list_items) {
      throw BudgetError("a list grew past its budget of " + std::to_string(limits_.max_list_items) +
                        " items");
    }
    return v;
  }

  Flow ExecNode(const Node& node, std::string& out) {
    Step();
    try {
      switch (node.kind) {
        case Node::Kind::kText:
          out += node.text;
          CheckOutput(out);
          return Flow::kNormal;
        case Node::Kind::kOutput:
          out += Eval(*node.expr).Str();
          CheckOutput(out);
          return Flow::kNormal;
        case Node::Kind::kIf:
          for (const auto& [cond, body] : node.branches) {
            if (Eval(*cond).Truthy()) return Exec(body, out);
          }
          return Exec(node.else_body, out);
        case Node::Kind::kFor:
          return ExecFor(node, out);
        case Node::Kind::kSet:
          Assign(node, Eval(*node.expr));
          return Flow::kNormal;
        case Node::Kind::kSetBlock: {
          std::string captured;
          Exec(node.body, captured);
          frames_.back()[node.targets[0]] = Value::String(std::move(captured));
          return Flow::kNormal;
        }
        case Node::Kind::kMacro:
          DefineMacro(node);
          return Flow::kNormal;
        case Node::Kind::kBreak:
          return Flow::kBreak;
        case Node::Kind::kContinue:
          return Flow::kContinue;
        case Node::Kind::kBlock:
          return Exec(node.body, out);
      }
    } catch (JinjaError& e) {
      if (e.line() == 0) e.set_line(node.line);
      throw;
    }
    return Flow::kNormal;
  }

  void Assign(const Node& node, const Value& value) {
    if (!node.attr.empty()) {
      const Value target = Lookup(node.targets[0]);
      if (!target.is_namespace()) {
        throw JinjaError("cannot assign attribute '" + node.attr + "' on '" + node.targets[0] +
                         "', which is not a namespace()");
      }
      Dict& items = target.mutable_namespace();
      for (auto& [k, v] : items) {
        if (k == node.attr) {
          v = value;
          return;
        }
      }
      items.emplace_back(node.attr, value);
      return;
    }
    Bind(node.targets, value);
  }

  void Bind(const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = value;
      return;
    }
    const List items = value.is_list() ? value.as_list() : List{};
    if (!value.is_list() || items.size() != targets.size()) {
      throw JinjaError("cannot unpack " + value.TypeName() + " into " +
                       std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) frames_.back()[targets[i]] = items[i];
  }

  Flow ExecFor(const Node& node, std::string& out) {
    const Value iterable = Eval(*node.expr);
    List items;
    if (iterable.is_none()) throw JinjaError("'NoneType' object is not iterable");
    if (iterable.is_undefined()) {
      items = {};
    } else {
      CallArgs none;
      items = Builtins::ApplyFilter("list", iterable, none).as_list();
    }
    if (node.filter != nullptr) {
      List kept;
      for (const Value& item : items) {
        frames_.emplace_back();
        Bind(node.targets, item);
        const bool keep = Eval(*node.filter).Truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return Exec(node.else_body, out);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Step();  // also for an empty body
      frames_.emplace_back();
      Bind(node.targets, items[i]);
      frames_.back()["loop"] = LoopValue(items, i);
      const Flow flow = Exec(node.body, out);
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  static Value LoopValue(const List& items, int64_t i) {
    const int64_t n = static_cast<int64_t>(items.size());
    Dict loop = {
        {"index", Value::Int(i + 1)},
        {"index0", Value::Int(i)},
        {"revindex", Value::Int(n - i)},
        {"revindex0", Value::Int(n - i - 1)},
        {"first", Value::Bool(i == 0)},
        {"last", Value::Bool(i == n - 1)},
        {"length", Value::Int(n)},
        {"depth", Value::Int(1)},
        {"depth0", Value::Int(0)},
        {"previtem", i > 0 ? items[i - 1] : Value::Undefined()},
        {"nextitem", i + 1 < n ? items[i + 1] : Value::Undefined()},
        {"cycle",
         Value::MakeFunction("loop.cycle",
                             [i](CallArgs& a) {
                               if (a.positional.empty())
                                 throw JinjaError("loop.cycle() needs arguments");
                               return a.positional[static_cast<size_t>(i) % a.positional.size()];
                             })},
    };
    return Value::MakeDict(std::move(loop));
  }

  void DefineMacro(const Node& node) {
    const Node* macro = &node;
    frames_.back()[node.name] = Value::MakeFunction(node.name, [this, macro](CallArgs& a) {
      if (a.positional.size() > macro->params.size()) {
        throw JinjaError("macro '" + macro->name + "' takes " +
                         std::to_string(macro->params.size()) + " argument(s)");
      }
      Frame frame;
      for (size_t i = 0; i < macro->params.size(); ++i) {
        const auto& [param, default_expr] = macro->params[i];
        if (i < a.positional.size()) {
          frame[param] = a.positional[i];
        } else if (default_expr != nullptr) {
          frame[param] = Eval(*default_expr);
        } else {
          frame[param] = Value::Undefined(param);
        }
      }
      for (auto& [k, v] : a.keyword) {
        const bool known = std::any_of(macro->params.begin(), macro->params.end(),
                                       [&k = k](const auto& p) { return p.first == k; });
        if (!known) throw JinjaError("macro '" + macro->name + "' has no parameter '" + k + "'");
        frame[k] = v;
      }
      if (macro_depth_ >= kMaxMacroDepth) {
        throw JinjaError("macro '" + macro->name + "' nests deeper than " +
                         std::to_string(kMaxMacroDepth) + " calls (unbounded recursion?)");
      }
      frames_.push_back(std::move(frame));
      ++macro_depth_;
      std::string out;
      try {
        Exec(macro->body, out);
      } catch (...) {
        --macro_depth_;
        frames_.pop_back();
        throw;
      }
      --macro_depth_;
      frames_.pop_back();
      return Value::String(std::move(out));
    });
  }

  // ---------------------------------------------------------------- expressions

  Value Eval(const Expr& e) {
    Step();
    try {
      return Sized(EvalUnchecked(e));
    } catch (JinjaError& err) {
      if (err.line() == 0) err.set_line(e.line);
      throw;
    }
  }

  CallArgs EvalArgs(const Expr& e, size_t first) {
    CallArgs args;
    args.line = e.line;
    for (size_t i = first; i < e.children.size(); ++i)
      args.positional.push_back(Eval(*e.children[i]));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, Eval(*v));
    return args;
  }

  Value EvalUnchecked(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List items;
        for (const ExprPtr& c : e.children) items.push_back(Eval(*c));
        return Value::MakeList(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        Dict items;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          const Value key = Eval(*e.children[i]);
          if (!key.is_string())
            throw JinjaError("dict keys must be strings, got " + key.TypeName());
          Value value = Eval(*e.children[i + 1]);
          auto it = std::find_if(items.begin(), items.end(),
                                 [&](const auto& kv) { return kv.first == key.as_string(); });
          if (it != items.end()) {
            it->second = std::move(value);
          } else {
            items.emplace_back(key.as_string(), std::move(value));
          }
        }
        return Value::MakeDict(std::move(items));
      }
      case Expr::Kind::kGetAttr:
        return GetAttr(Eval(*e.children[0]), e.name);
      case Expr::Kind::kGetItem:
        return GetItem(Eval(*e.children[0]), Eval(*e.children[1]));
      case Expr::Kind::kSlice:
        return Slice(e);
      case Expr::Kind::kCall: {
        const Value callee = Eval(*e.children[0]);
        CallArgs args = EvalArgs(e, 1);
        if (!callee.is_callable()) {
          if (callee.is_undefined()) ThrowUndefined(callee, "call");
          throw JinjaError("'" + callee.TypeName() + "' object is not callable");
        }
        return callee.Call(args);
      }
      case Expr::Kind::kFilter: {
        const Value value = Eval(*e.children[0]);
        CallArgs args = EvalArgs(e, 1);
        return Builtins::ApplyFilter(e.name, value, args);
      }
      case Expr::Kind::kTest: {
        const Value value = Eval(*e.children[0]);
        CallArgs args = EvalArgs(e, 1);
        return Value::Bool(Builtins::ApplyTest(e.name, value, args) != e.negated);
      }
      case Expr::Kind::kUnary:
        return Unary(e.name, Eval(*e.children[0]));
      case Expr::Kind::kBinary:
        return BinaryOp(e.name, Eval(*e.children[0]), Eval(*e.children[1]));
      case Expr::Kind::kCompare:
        return Value::Bool(Compare(e.name, Eval(*e.children[0]), Eval(*e.children[1])));
      case Expr::Kind::kAnd: {
        Value left = Eval(*e.children[0]);
        return left.Truthy() ? Eval(*e.children[1]) : left;
      }
      case Expr::Kind::kOr: {
        Value left = Eval(*e.children[0]);
        return left.Truthy() ? left : Eval(*e.children[1]);
      }
      case Expr::Kind::kCondition:
        if (Eval(*e.children[0]).Truthy()) return Eval(*e.children[1]);
        return e.children[2] != nullptr ? Eval(*e.children[2]) : Value::Undefined();
    }
    return Value::Undefined();
  }

  static Value GetAttr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) ThrowUndefined(obj, "attribute '" + name + "'");
    if (obj.is_dict()) {
      if (!obj.is_namespace()) {
        Value method = Builtins::Method(obj, name);
        if (!method.is_undefined()) return method;
      }
      if (const Value* v = obj.Find(name)) return *v;
      return Value::Undefined();
    }
    return Builtins::Method(obj, name);
  }

  static Value GetItem(const Value& obj, const Value& key) {
    if (obj.is_undefined()) ThrowUndefined(obj, "item");
    if (obj.is_dict()) {
      if (key.is_string()) {
        if (const Value* v = obj.Find(key.as_string())) return *v;
        return GetAttr(obj, key.as_string());
      }
      return Value::Undefined();
    }
    if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
      if (obj.is_list()) {
        const List& items = obj.as_list();
        int64_t i = key.as_int();
        if (i < 0) i += static_cast<int64_t>(items.size());
        if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value::Undefined();
        return items[static_cast<size_t>(i)];
      }
      const std::u32string cps = Utf8ToCodePoints(obj.as_string());
      int64_t i = key.as_int();
      if (i < 0) i += static_cast<int64_t>(cps.size());
      if (i < 0 || i >= static_cast<int64_t>(cps.size())) return Value::Undefined();
      return Value::String(CodePointsToUtf8(std::u32string(1, cps[static_cast<size_t>(i)])));
    }
    if (key.is_string()) return GetAttr(obj, key.as_string());
    return Value::Undefined();
  }

  Value Slice(const Expr& e) {
    const Value obj = Eval(*e.children[0]);
    Value bounds[3];
    for (int i = 0; i < 3; ++i) {
      if (e.children[i + 1] != nullptr) bounds[i] = Eval(*e.children[i + 1]);
    }
    if (obj.is_list()) {
      const List& items = obj.as_list();
      List out;
      for (size_t i :
           SliceIndices(static_cast<int64_t>(items.size()), bounds[0], bounds[1], bounds[2])) {
        out.push_back(items[i]);
      }
      return Value::MakeList(std::move(out), obj.is_tuple());
    }
    if (obj.is_string()) {
      const std::u32string cps = Utf8ToCodePoints(obj.as_string());
      std::u32string out;
      for (size_t i :
           SliceIndices(static_cast<int64_t>(cps.size()), bounds[0], bounds[1], bounds[2])) {
        out += cps[i];
      }
      return Value::String(CodePointsToUtf8(out));
    }
    if (obj.is_undefined()) ThrowUndefined(obj, "slice");
    throw JinjaError("'" + obj.TypeName() + "' object is not subscriptable");
  }

  static Value Unary(const std::string& op, const Value& v) {
    if (op == "not") return Value::Bool(!v.Truthy());
    if (v.is_undefined()) ThrowUndefined(v, "unary " + op);
    if (v.is_float()) return Value::Float(op == "-" ? -v.as_double() : v.as_double());
    if (v.is_int() || v.is_bool()) {
      return Value::Int(op == "-" ? CheckedSub(0, v.as_int()) : v.as_int());
    }
    throw JinjaError("bad operand type for unary " + op + ": '" + v.TypeName() + "'");
  }

  Value BinaryOp(const std::string& op, const Value& a, const Value& b) const {
    if (op == "~") return Value::String(a.Str() + b.Str());
    if (a.is_undefined()) ThrowUndefined(a, "'" + op + "'");
    if (b.is_undefined()) ThrowUndefined(b, "'" + op + "'");
    const bool numbers = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
    const bool floats = a.is_float() || b.is_float();
    if (op == "+") {
      if (numbers) {
        return floats ? Value::Float(a.as_double() + b.as_double())
                      : Value::Int(CheckedAdd(a.as_int(), b.as_int()));
      }
      if (a.is_string() && b.is_string()) return Value::String(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        List items = a.as_list();
        items.insert(items.end(), b.as_list().begin(), b.as_list().end());
        return Value::MakeList(std::move(items), a.is_tuple());
      }
      ThrowOperands(op, a, b);
    }
    if (op == "*" && !numbers) {
      const Value& seq = a.is_int() ? b : a;
      const Value& count = a.is_int() ? a : b;
      if (!count.is_int() || !(seq.is_string() || seq.is_list())) ThrowOperands(op, a, b);
      const int64_t n = std::min<int64_t>(count.as_int(), 100000);
      // Checked before building: "x" * 100000 repeated on its own result would take gigabytes.
      const int64_t unit = seq.is_string() ? static_cast<int64_t>(seq.as_string().size())
                                           : static_cast<int64_t>(seq.as_list().size());
      const int64_t budget = seq.is_string() ? limits_.max_output_bytes : limits_.max_list_items;
      if (n > 0 && unit > budget / n) {
        throw BudgetError(std::string(seq.is_string() ? "a string" : "a list") +
                          " repeated would grow past its budget of " + std::to_string(budget) +
                          (seq.is_string() ? " bytes" : " items"));
      }
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq.as_string();
        return Value::String(std::move(out));
      }
      List out;
      for (int64_t i = 0; i < n; ++i)
        out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
      return Value::MakeList(std::move(out), seq.is_tuple());
    }
    if (op == "%" && a.is_string()) {
      throw JinjaError("unsupported construct: string formatting with '%'");
    }
    if (!numbers) ThrowOperands(op, a, b);
    if (op == "-") {
      return floats ? Value::Float(a.as_double() - b.as_double())
                    : Value::Int(CheckedSub(a.as_int(), b.as_int()));
    }
    if (op == "*") {
      return floats ? Value::Float(a.as_double() * b.as_double())
                    : Value::Int(CheckedMul(a.as_int(), b.as_int()));
    }
    if (op == "/") {
      if (b.as_double() == 0.0) throw JinjaError("division by zero");
      return Value::Float(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0.0) throw JinjaError("integer division or modulo by zero");
      if (floats) {
        const double q = std::floor(a.as_double() / b.as_double());
        return op == "//" ? Value::Float(q) : Value::Float(a.as_double() - q * b.as_double());
      }
      // x // -1 is -x, which overflows for the smallest int; x % -1 is 0.
      if (b.as_int() == -1) return Value::Int(op == "//" ? CheckedSub(0, a.as_int()) : 0);
      const int64_t q = FloorDiv(a.as_int(), b.as_int());
      return op == "//" ? Value::Int(q) : Value::Int(a.as_int() - q * b.as_int());
    }
    if (op == "**") {
      if (!floats && b.as_int() >= 0) {
        const int64_t base = a.as_int(), exp = b.as_int();
        if (base == 0 || base == 1) return Value::Int(exp == 0 ? 1 : base);
        if (base == -1) return Value::Int(exp % 2 == 0 ? 1 : -1);
        int64_t r = 1;  // |base| >= 2: overflows within 64 factors
        for (int64_t i = 0; i < exp; ++i) r = CheckedMul(r, base);
        return Value::Int(r);
      }
      return Value::Float(std::pow(a.as_double(), b.as_double()));
    }
    ThrowOperands(op, a, b);
  }

  static bool Contains(const Value& container, const Value& item) {
    if (container.is_string()) {
      if (!item.is_string()) {
        throw JinjaError("'in <string>' requires a string as the left operand, not " +
                         item.TypeName());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    }
    if (container.is_dict()) return item.is_string() && container.Find(item.as_string()) != nullptr;
    if (container.is_list()) {
      for (const Value& v : container.as_list()) {
        if (Equals(v, item)) return true;
      }
      return false;
    }
    if (container.is_undefined()) ThrowUndefined(container, "'in'");
    throw JinjaError("argument of type '" + container.TypeName() + "' is not iterable");
  }

  static bool Compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Equals(a, b);
    if (op == "!=") return !Equals(a, b);
    if (op == "in") return Contains(b, a);
    if (op == "not in") return !Contains(b, a);
    if (a.is_undefined()) ThrowUndefined(a, "comparison");
    if (b.is_undefined()) ThrowUndefined(b, "comparison");
    if (op == "<") return LessThan(a, b);
    if (op == ">") return LessThan(b, a);
    if (op == "<=") return !LessThan(b, a);
    return !LessThan(a, b);  // ">="
  }

  // Macros may call macros; a template that recurses without end fails instead of
  // exhausting the stack.
  static constexpr int kMaxMacroDepth = 64;
  int macro_depth_ = 0;
  RenderLimits limits_;
  int64_t steps_ = 0;
  std::vector<Frame> frames_;
};

std::string WithLine(const JinjaError& e) {
  return e.line() > 0 ? "line " + std::to_string(e.line()) + ": " + e.message() : e.message();
}

}  // namespace

StatusOr<Template> Template::Parse(std::string_view text) {
  try {
    Template t;
    t.root_ = std::make_shared<const Body>(ParseTemplate(text));
    return t;
  } catch (const JinjaError& e) {
    return InvalidArgumentError(WithLine(e));
  }
}

StatusOr<std::string> Template::Render(const std::vector<std::pair<std::string, Value>>& variables,
                                       std::chrono::system_clock::time_point now,
                                       RenderError* error, const RenderLimits& limits) const {
  try {
    const ScopedStringBudget string_budget(limits.max_output_bytes);
    Evaluator evaluator(variables, now, limits);
    return evaluator.Run(*root_);
  } catch (const BudgetError& e) {
    Status status = ResourceExhaustedError(WithLine(e));
    if (error != nullptr) *error = {status, false};
    return status;
  } catch (const JinjaError& e) {
    Status status = InvalidArgumentError(e.raised() ? e.message() : WithLine(e));
    if (error != nullptr) *error = {status, e.raised()};
    return status;
  }
}

}  // namespace uc::chat::jinja
