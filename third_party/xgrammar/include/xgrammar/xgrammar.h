/*!
 *  Copyright (c) 2024 by Contributors
 * \file xgrammar/xgrammar.h
 * \brief The header for the support of grammar-guided generation.
 */

#ifndef XGRAMMAR_XGRAMMAR_H_
#define XGRAMMAR_XGRAMMAR_H_

#include <xgrammar/compiler.h>
#include <xgrammar/config.h>
#include <xgrammar/exception.h>
#include <xgrammar/grammar.h>
#include <xgrammar/matcher.h>
#include <xgrammar/tokenizer_info.h>

#endif  // XGRAMMAR_XGRAMMAR_H_
