// Subcommands of the `tessera` binary. Each returns a process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include "common/status.h"

namespace tessera {

// Registers the subcommand on `app`; its callback runs it and stores the exit code.
void AddSynthCommand(CLI::App& app, int* exit_code);
void AddLogitsCommand(CLI::App& app, int* exit_code);
void AddServeCommand(CLI::App& app, int* exit_code);
void AddTokenizeCommand(CLI::App& app, int* exit_code);
void AddRenderChatCommand(CLI::App& app, int* exit_code);
void AddGenerateCommand(CLI::App& app, int* exit_code);
void AddClientCommand(CLI::App& app, int* exit_code);
void AddKernelCommand(CLI::App& app, int* exit_code);
void AddGgufInfoCommand(CLI::App& app, int* exit_code);
void AddSimulateCommand(CLI::App& app, int* exit_code);
void AddCalibrateCommand(CLI::App& app, int* exit_code);
void AddPlanCommand(CLI::App& app, int* exit_code);

// `tessera --version`, and the binary's version in files it writes.
inline constexpr char kTesseraVersion[] = "0.1.0";
// receipt-keygen and verify (cmd_receipt.cc).
void AddReceiptCommands(CLI::App& app, int* exit_code);
// `tessera replay DIR` (cmd_replay.cc): what serve --record recorded, re-run offline.
void AddReplayCommand(CLI::App& app, int* exit_code);

// Logs `s` as an error; returns the exit code of a subcommand that failed (1).
int Fail(const Status& s);

}  // namespace tessera
