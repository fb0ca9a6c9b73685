// ptxfactory for VS Code: a thin client of the ptxfactory language server (vscode-languageclient 9).
//
// The server brings the "Optimise kernel" code lens and the "Apply candidate N" code actions (the light
// bulb; the fastest one preferred). This extension adds its own commands, named ptxfactory-vscode.* so
// they never clash with the server's ptxfactory.optimise / ptxfactory.cancel (vscode-languageclient
// registers those as VS Code commands itself), and calls the server's commands with
// workspace/executeCommand. Job progress goes to the notification area: the client declares no
// window.workDoneProgress, so the server reports on ptxfactory/progress (which names the job, its kernel
// and document), shown here with window.withProgress and a Cancel button. "Show PTX"/"Show SASS" open a
// candidate's listing beside the original's in a diff editor, as read-only ptxfactory:// documents that
// ViewProvider serves (ptxfactory.show's texts, else workspace/textDocumentContent).
import * as net from "net";
import * as vscode from "vscode";
import {
  CodeAction,
  CodeActionRequest,
  CodeLensRequest,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  StreamInfo,
  TransportKind,
} from "vscode-languageclient/node";

import {
  CANCEL,
  CODE_ACTION_KIND,
  JOBS,
  Job,
  JobTable,
  KernelLens,
  NotificationProgressFeature,
  OPTIMISE,
  PROGRESS_NOTIFICATION,
  ProgressNotification,
  REPORT,
  ResolvedServer,
  SHOW,
  SHOW_SCHEME,
  Settings,
  SettingsError,
  TEXT_DOCUMENT_CONTENT,
  View,
  ViewCache,
  contentText,
  kernelAt,
  kernelLenses,
  reportMarkdown,
  reportText,
  parseCandidate,
  parseShowUri,
  resolveServer,
  showArgs,
  shownViews,
  viewsTitle,
} from "./config";

const CMD = {
  optimise: "ptxfactory-vscode.optimiseAtCursor",
  cancel: "ptxfactory-vscode.cancelJob",
  report: "ptxfactory-vscode.showReport",
  applyBest: "ptxfactory-vscode.applyBestCandidate",
  restart: "ptxfactory-vscode.restartServer",
  showPtx: "ptxfactory-vscode.showPtx",
  showSass: "ptxfactory-vscode.showSass",
};

let client: LanguageClient | undefined;
let output: vscode.OutputChannel;
const jobs = new JobTable();
const views = new ViewCache();

/** Progress notifications in flight, by job id. */
interface OpenProgress {
  report?: (value: { message?: string; increment?: number }) => void;
  done?: () => void;
  ended: boolean;
  pending: { message?: string; increment: number };
}
const openProgress = new Map<string, OpenProgress>();

function readSettings(): Partial<Settings> {
  const c = vscode.workspace.getConfiguration("ptxfactory.server");
  return {
    mode: c.get("mode"),
    command: c.get("command"),
    sshHost: c.get("sshHost"),
    sshArgs: c.get("sshArgs"),
    tcpAddress: c.get("tcpAddress"),
    token: c.get("token"),
  };
}

function serverOptions(resolved: ResolvedServer): ServerOptions {
  const t = resolved.target;
  if (t.kind === "tcp") {
    return () =>
      new Promise<StreamInfo>((resolve, reject) => {
        const socket = net.connect({ host: t.host, port: t.port });
        socket.once("connect", () => resolve({ reader: socket, writer: socket }));
        socket.once("error", reject);
      });
  }
  return {
    command: t.command,
    args: t.args,
    transport: TransportKind.stdio,
    options: { env: { ...process.env, ...t.env } },
  };
}

async function startClient(): Promise<void> {
  let resolved: ResolvedServer;
  try {
    resolved = resolveServer(readSettings());
  } catch (e) {
    if (e instanceof SettingsError) {
      const open = await vscode.window.showErrorMessage(`ptxfactory: ${e.message}`, "Open Settings");
      if (open) {
        void vscode.commands.executeCommand("workbench.action.openSettings", "ptxfactory.server");
      }
      return;
    }
    throw e;
  }
  output.appendLine(`starting the server: ${resolved.description}`);
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: "file", language: "cuda-cpp" },
      { scheme: "file", language: "ptx" },
    ],
    initializationOptions: resolved.initializationOptions,
    outputChannel: output,
  };
  const c = new LanguageClient("ptxfactory", "ptxfactory", serverOptions(resolved), clientOptions);
  c.registerFeature(new NotificationProgressFeature());
  c.onNotification(PROGRESS_NOTIFICATION, (p: ProgressNotification) => onProgress(p));
  client = c;
  try {
    await c.start();
  } catch (e) {
    void vscode.window.showErrorMessage(`ptxfactory: cannot start the server (${resolved.description}): ${String(e)}`);
  }
}

async function stopClient(): Promise<void> {
  const c = client;
  client = undefined;
  for (const [id, p] of openProgress) {
    p.ended = true;
    p.done?.();
    openProgress.delete(id);
  }
  if (c) {
    try {
      await c.stop();
    } catch (e) {
      output.appendLine(`stopping the server: ${String(e)}`);
    }
  }
}

function onProgress(p: ProgressNotification): void {
  const { job, increment } = jobs.progress(p);
  let open = openProgress.get(job.jobId);
  if (p.kind === "begin" && !open) {
    const entry: OpenProgress = { ended: false, pending: { message: p.message, increment } };
    openProgress.set(job.jobId, entry);
    open = entry;
    void vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `ptxfactory: ${p.title ?? `Optimising ${job.kernel}`}`, cancellable: true },
      (progress, cancel) =>
        new Promise<void>((resolve) => {
          entry.report = (v) => progress.report(v);
          entry.done = resolve;
          cancel.onCancellationRequested(() => void cancelJob(job));
          progress.report(entry.pending);
          if (entry.ended) {
            resolve();
          }
        }),
    );
  } else if (open && p.kind === "report") {
    if (open.report) {
      open.report({ message: p.message, increment });
    } else {
      open.pending = { message: p.message, increment: open.pending.increment + increment };
    }
  }
  if (p.kind === "end") {
    if (open) {
      open.ended = true;
      open.done?.();
      openProgress.delete(job.jobId);
    }
    void announceEnd(job, p.message ?? "done");
  }
}

async function announceEnd(job: Job, message: string): Promise<void> {
  const text = `ptxfactory: ${job.kernel}: ${message}`;
  const faster = /faster candidate/.test(message);
  const choice = faster
    ? await vscode.window.showInformationMessage(text, "Show report", "Apply best")
    : await vscode.window.showInformationMessage(text, "Show report");
  if (choice === "Show report") {
    await showReport(job);
  } else if (choice === "Apply best") {
    const editor = await showKernel(job);
    if (editor) {
      await applyBest();
    }
  }
}

function activeClient(): LanguageClient | undefined {
  if (!client || !client.isRunning()) {
    void vscode.window.showWarningMessage("ptxfactory: the server is not running (see the ptxfactory output)");
    return undefined;
  }
  return client;
}

async function lensesOf(c: LanguageClient, doc: vscode.TextDocument): Promise<KernelLens[]> {
  const uri = c.code2ProtocolConverter.asUri(doc.uri);
  return kernelLenses(await c.sendRequest(CodeLensRequest.type, { textDocument: { uri } }));
}

/** The kernel at the cursor of the active editor (asks when the cursor is above every kernel). */
async function kernelAtCursor(c: LanguageClient): Promise<{ kernel: KernelLens; editor: vscode.TextEditor } | undefined> {
  const editor = vscode.window.activeTextEditor;
  if (!editor) {
    void vscode.window.showWarningMessage("ptxfactory: open a CUDA file first");
    return undefined;
  }
  const kernels = await lensesOf(c, editor.document);
  if (kernels.length === 0) {
    void vscode.window.showWarningMessage(
      "ptxfactory: no kernel here that the spec describes (the spec is the file's name + .toml, e.g. rmsnorm.cu.toml)",
    );
    return undefined;
  }
  let kernel = kernelAt(kernels, editor.selection.active.line);
  if (!kernel) {
    const pick = await vscode.window.showQuickPick(
      kernels.map((k) => ({ label: k.kernel, description: `line ${k.line + 1}`, k })),
      { placeHolder: "Which kernel?" },
    );
    kernel = pick?.k;
  }
  return kernel ? { kernel, editor } : undefined;
}

async function optimiseAtCursor(): Promise<void> {
  const c = activeClient();
  const found = c && (await kernelAtCursor(c));
  if (!c || !found) {
    return;
  }
  const args = { uri: found.kernel.uri, kernel: found.kernel.kernel };
  try {
    const result = await c.sendRequest(ExecuteCommandRequest.type, { command: OPTIMISE, arguments: [args] });
    jobs.started(result, args);
    if (result?.already_running) {
      void vscode.window.showInformationMessage(`ptxfactory: ${args.kernel} is being optimised already (job ${result.job_id})`);
    }
  } catch (e) {
    void vscode.window.showErrorMessage(`ptxfactory: optimise ${args.kernel}: ${messageOf(e)}`);
  }
}

function advertises(c: LanguageClient, command: string): boolean {
  return (c.initializeResult?.capabilities.executeCommandProvider?.commands ?? []).includes(command);
}

async function cancelJob(job?: Job): Promise<void> {
  const c = activeClient();
  if (!c) {
    return;
  }
  if (!job) {
    if (advertises(c, JOBS)) {
      // The shared daemon lists its queued and running jobs, those of other sessions included.
      try {
        const listed = await c.sendRequest(ExecuteCommandRequest.type, { command: JOBS, arguments: [{ active: true }] });
        for (const info of listed?.jobs ?? []) {
          jobs.listed(info);
        }
      } catch (e) {
        output.appendLine(`${JOBS}: ${messageOf(e)}`);
      }
    }
    const running = jobs.running();
    if (running.length === 0) {
      void vscode.window.showInformationMessage("ptxfactory: no running job");
      return;
    }
    if (running.length === 1) {
      job = running[0];
    } else {
      const pick = await vscode.window.showQuickPick(
        running.map((j) => ({ label: j.kernel, description: `${j.percentage}% · job ${j.jobId}`, detail: j.message, j })),
        { placeHolder: "Cancel which job?" },
      );
      job = pick?.j;
    }
  }
  if (!job) {
    return;
  }
  try {
    const result = await c.sendRequest(ExecuteCommandRequest.type, { command: CANCEL, arguments: [{ job_id: job.jobId }] });
    if (!result?.cancelled) {
      jobs.ended(job.jobId);
      void vscode.window.showInformationMessage(`ptxfactory: job ${job.jobId} had already ended (${result?.state})`);
    }
  } catch (e) {
    void vscode.window.showErrorMessage(`ptxfactory: cancel: ${messageOf(e)}`);
  }
}

async function showKernel(job: Job): Promise<vscode.TextEditor | undefined> {
  const c = client;
  if (!c) {
    return undefined;
  }
  const doc = await vscode.workspace.openTextDocument(c.protocol2CodeConverter.asUri(job.uri));
  const editor = await vscode.window.showTextDocument(doc);
  const kernel = (await lensesOf(c, doc)).find((k) => k.kernel === job.kernel);
  if (kernel) {
    const pos = new vscode.Position(kernel.line, kernel.character);
    editor.selection = new vscode.Selection(pos, pos);
    editor.revealRange(new vscode.Range(pos, pos));
  }
  return editor;
}

/** The server's ptxfactory.report for the job when it has one (it writes report.md and usually opens it
 * itself through window/showDocument), else the job's state and the code actions, as markdown. */
async function showReport(job?: Job): Promise<void> {
  const c = activeClient();
  if (!c) {
    return;
  }
  let kernel: KernelLens | undefined;
  if (job) {
    const doc = await vscode.workspace.openTextDocument(c.protocol2CodeConverter.asUri(job.uri));
    kernel = (await lensesOf(c, doc)).find((k) => k.kernel === job!.kernel);
  } else {
    kernel = (await kernelAtCursor(c))?.kernel;
    job = kernel && jobs.latest(kernel.uri, kernel.kernel);
  }
  if (!kernel) {
    return;
  }
  let text: string | undefined;
  if (job && !job.running && advertises(c, REPORT)) {
    try {
      const result = await c.sendRequest(ExecuteCommandRequest.type, { command: REPORT, arguments: [{ job_id: job.jobId }] });
      if (result?.shown) {
        return;
      }
      text = reportText(result);
    } catch (e) {
      output.appendLine(`${REPORT}: ${messageOf(e)}; showing the code actions instead`);
    }
  }
  if (text === undefined) {
    try {
      const pos = { line: kernel.line, character: kernel.character };
      const actions = await c.sendRequest(CodeActionRequest.type, {
        textDocument: { uri: kernel.uri },
        range: { start: pos, end: pos },
        context: { diagnostics: [], only: [CODE_ACTION_KIND], triggerKind: 1 },
      });
      text = reportMarkdown(kernel.kernel, job, (actions ?? []).filter((a): a is CodeAction => !("command" in a && typeof a.command === "string")));
    } catch (e) {
      void vscode.window.showErrorMessage(`ptxfactory: report: ${messageOf(e)}`);
      return;
    }
  }
  const doc = await vscode.workspace.openTextDocument({ language: "markdown", content: text });
  await vscode.window.showTextDocument(doc, { viewColumn: vscode.ViewColumn.Beside, preview: true });
}

/** The preferred "Apply candidate" action at the cursor, applied without a menu. */
async function applyBest(): Promise<void> {
  await vscode.commands.executeCommand("editor.action.codeAction", {
    kind: CODE_ACTION_KIND,
    preferred: true,
    apply: "ifSingle",
  });
}

/** Serves ptxfactory://show/JOB/N/KERNEL.ptx|.sass read-only documents (the server's window/showDocument, and ours):
 * the text this window was sent, else the server's workspace/textDocumentContent, else ptxfactory.show again with
 * the URI's job, candidate and view (a server that no longer has it, e.g. after a restart). */
class ViewProvider implements vscode.TextDocumentContentProvider {
  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    const key = uri.toString(true);
    const known = views.get(key);
    if (known !== undefined) {
      return known;
    }
    const c = client;
    if (!c || !c.isRunning()) {
      return `// ptxfactory: the server is not running; cannot read ${key}\n`;
    }
    let why = "";
    try {
      const text = contentText(await c.sendRequest(TEXT_DOCUMENT_CONTENT, { uri: key }));
      if (text !== undefined) {
        views.set(key, text);
        return text;
      }
    } catch (e) {
      why = messageOf(e);
    }
    const parsed = parseShowUri(key);
    if (parsed) {
      try {
        const shown = shownViews(
          await c.sendRequest(ExecuteCommandRequest.type, { command: SHOW, arguments: [showArgs(parsed.jobId, parsed.view, parsed.candidate)] }),
        );
        if (shown) {
          views.add(shown);
          return shown.uri === key ? shown.text : shown.originalText;
        }
      } catch (e) {
        why = messageOf(e);
      }
    }
    return `// ptxfactory: cannot read ${key}: ${why || "the server has no such document"}\n`;
  }
}

/** The ended job to show for the kernel at the cursor: the newest this window knows, else the newest the server
 * lists for the file (ptxfactory.jobs, when it has that command). */
async function jobToShow(c: LanguageClient, kernel: KernelLens): Promise<Job | undefined> {
  const known = jobs.all().find((j) => j.uri === kernel.uri && j.kernel === kernel.kernel && !j.running);
  if (known || !advertises(c, JOBS)) {
    return known;
  }
  try {
    const listed = await c.sendRequest(ExecuteCommandRequest.type, { command: JOBS, arguments: [{ uri: kernel.uri }] });
    const info = (listed?.jobs ?? []).find(
      (j: { kernel: string; state: string }) => j.kernel === kernel.kernel && j.state !== "queued" && j.state !== "running",
    );
    return info ? jobs.listed(info) : undefined;
  } catch (e) {
    output.appendLine(`${JOBS}: ${messageOf(e)}`);
    return undefined;
  }
}

/** "Show PTX" / "Show SASS": candidate N (asked; empty: the best) of the kernel's latest ended job, in a diff editor
 * beside the original's (ptxfactory.show with show=false, then vscode.diff on the two ptxfactory: URIs). */
async function showViews(view: View): Promise<void> {
  const c = activeClient();
  const found = c && (await kernelAtCursor(c));
  if (!c || !found) {
    return;
  }
  const job = await jobToShow(c, found.kernel);
  if (!job) {
    void vscode.window.showInformationMessage(`ptxfactory: no ended job on ${found.kernel.kernel} yet: optimise it first`);
    return;
  }
  const typed = await vscode.window.showInputBox({
    title: `ptxfactory: ${view.toUpperCase()} of ${found.kernel.kernel} (job ${job.jobId})`,
    prompt: "Candidate number as in the report (0: the original); empty: the best",
    validateInput: (text) => {
      const parsed = parseCandidate(text);
      return typeof parsed === "string" ? parsed : undefined;
    },
  });
  if (typed === undefined) {
    return;
  }
  const parsed = parseCandidate(typed);
  if (typeof parsed === "string") {
    return;
  }
  try {
    const shown = shownViews(
      await c.sendRequest(ExecuteCommandRequest.type, { command: SHOW, arguments: [showArgs(job.jobId, view, parsed.candidate)] }),
    );
    if (!shown) {
      void vscode.window.showErrorMessage(`ptxfactory: ${SHOW} gave no views`);
      return;
    }
    views.add(shown);
    const left = vscode.Uri.parse(shown.originalUri, true);
    const right = vscode.Uri.parse(shown.uri, true);
    if (shown.uri === shown.originalUri) {
      await vscode.window.showTextDocument(right, { viewColumn: vscode.ViewColumn.Beside, preview: true });
    } else {
      await vscode.commands.executeCommand("vscode.diff", left, right, viewsTitle(shown), { viewColumn: vscode.ViewColumn.Beside, preview: true });
    }
  } catch (e) {
    void vscode.window.showErrorMessage(`ptxfactory: show ${view}: ${messageOf(e)}`);
  }
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("ptxfactory");
  context.subscriptions.push(
    output,
    vscode.commands.registerCommand(CMD.optimise, optimiseAtCursor),
    vscode.commands.registerCommand(CMD.cancel, () => cancelJob()),
    vscode.commands.registerCommand(CMD.report, () => showReport()),
    vscode.commands.registerCommand(CMD.applyBest, applyBest),
    vscode.commands.registerCommand(CMD.showPtx, () => showViews("ptx")),
    vscode.commands.registerCommand(CMD.showSass, () => showViews("sass")),
    vscode.workspace.registerTextDocumentContentProvider(SHOW_SCHEME, new ViewProvider()),
    vscode.commands.registerCommand(CMD.restart, async () => {
      await stopClient();
      await startClient();
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (e.affectsConfiguration("ptxfactory.server")) {
        await stopClient();
        await startClient();
      }
    }),
  );
  await startClient();
}

export async function deactivate(): Promise<void> {
  await stopClient();
}
