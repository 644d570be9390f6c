// File: jinja_ast.h
// -----------------------------------------------------------------------------
// The syntax tree of a parsed Jinja template (internal to the chat library): expressions and
// statement nodes, each with the template line it came from. Built by ParseTemplate
// (jinja_parser.h), walked by the evaluator (jinja.cc). Immutable after parsing.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace uc::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // literal
    kName,      // name
    kList,      // children: items
    kTuple,     // children: items
    kDict,      // children: key0, value0, key1, value1, ...
    kGetAttr,   // children[0].name
    kGetItem,   // children[0][children[1]]
    kSlice,     // children[0][c1:c2:c3]; absent bounds are null
    kCall,      // children[0](children[1..], kwargs)
    kFilter,    // children[0] | name(children[1..], kwargs)
    kTest,      // children[0] is [not] name(children[1..])
    kUnary,     // name: "-", "+", "not"; children[0]
    kBinary,    // name: "+", "-", "*", "/", "//", "%", "**", "~"; children[0], children[1]
    kCompare,   // name: "==", "!=", "<", "<=", ">", ">=", "in", "not in"
    kAnd,       // children[0] and children[1]
    kOr,        // children[0] or children[1]
    kCondition  // children[1] if children[0] else children[2] (children[2] null: undefined)
  };

  Expr(Kind k, int l) : kind(k), line(l) {}

  Kind kind;
  int line;
  Value literal;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (condition, body) + else_body
    kFor,       // for targets in expr [if filter]: body [else: else_body]
    kSet,       // set targets = expr  (targets: names, or one "ns.attr")
    kSetBlock,  // set targets[0]: body rendered to a string
    kMacro,     // macro name(params): body
    kBreak,
    kContinue,
    kBlock,  // a body rendered in place ({% generation %}, transformers' assistant-mask marker)
  };

  Node(Kind k, int l) : kind(k), line(l) {}

  Kind kind;
  int line;
  std::string text;
  ExprPtr expr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace: targets[0].attr
  ExprPtr filter;
  std::string name;                                     // kMacro
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro: name, default (may be null)
};

}  // namespace uc::chat::jinja
