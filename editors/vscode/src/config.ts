// The extension's logic that needs no VS Code: settings → how to reach the server, the kernel at the
// cursor, the job table fed by ptxfactory/progress, and the report's markdown. Unit-tested with
// node's test runner (test/config.test.ts); extension.ts wires it to VS Code.
import type { ClientCapabilities, FeatureState, StaticFeature } from "vscode-languageclient";

/** The server's protocol (protocol/lsp.py in ptxfactory). */
export const OPTIMISE = "ptxfactory.optimise";
export const CANCEL = "ptxfactory.cancel";
/** Used only when the server advertises it (executeCommandProvider.commands). */
export const REPORT = "ptxfactory.report";
/** Used only when the server advertises it: the daemon's job list (jobs of every session). */
export const JOBS = "ptxfactory.jobs";
/** The PTX or SASS of a job's candidate beside the original's, as read-only ptxfactory: documents. */
export const SHOW = "ptxfactory.show";
/** The scheme of those documents: ptxfactory://show/JOB/N/KERNEL.ptx|.sass (served by workspace/textDocumentContent). */
export const SHOW_SCHEME = "ptxfactory";
export const TEXT_DOCUMENT_CONTENT = "workspace/textDocumentContent";
export const PROGRESS_NOTIFICATION = "ptxfactory/progress";
export const CODE_ACTION_KIND = "refactor.rewrite.ptxfactory";

export type Mode = "command" | "ssh" | "tcp";

/** The `ptxfactory.server.*` settings. */
export interface Settings {
  mode: Mode;
  command: string[];
  sshHost: string;
  sshArgs: string[];
  tcpAddress: string;
  token: string;
}

export const DEFAULT_SETTINGS: Settings = {
  mode: "command",
  command: ["ptxfactory", "lsp"],
  sshHost: "",
  sshArgs: [],
  tcpAddress: "127.0.0.1:7777",
  token: "",
};

/** Spawn `command args...` and speak LSP on its stdin/stdout. */
export interface StdioTarget {
  kind: "stdio";
  command: string;
  args: string[];
  /** Added to the environment of the spawned process (nothing today). */
  env: Record<string, string>;
}

/** Connect to host:port and speak LSP on the socket. */
export interface TcpTarget {
  kind: "tcp";
  host: string;
  port: number;
}

export interface ResolvedServer {
  target: StdioTarget | TcpTarget;
  /** Sent as the initialize request's initializationOptions (protocol/lsp.py InitializationOptions). */
  initializationOptions: { token?: string };
  /** For messages: "ptxfactory lsp", "ssh gpu-host", "tcp 127.0.0.1:7777". */
  description: string;
}

export class SettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SettingsError";
  }
}

const SAFE = /^[A-Za-z0-9@%+=:,./_-]+$/;

/** `arg` quoted for a POSIX shell: ssh joins the remote command's words with spaces for the remote shell. */
export function shellQuote(arg: string): string {
  return arg !== "" && SAFE.test(arg) ? arg : `'${arg.replace(/'/g, `'"'"'`)}'`;
}

/** "host:port" or "[v6]:port" → {host, port}; throws SettingsError otherwise. */
export function parseTcpAddress(address: string): { host: string; port: number } {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(address.trim()) ?? /^([^:\s]+):(\d+)$/.exec(address.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new SettingsError(`ptxfactory.server.tcpAddress: "${address}" is not host:port (e.g. 127.0.0.1:7777)`);
  }
  return { host: m[1], port };
}

function stringList(value: unknown, name: string): string[] {
  if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) {
    throw new SettingsError(`ptxfactory.server.${name} must be a list of strings`);
  }
  return value as string[];
}

/** Settings (missing ones take their defaults) → how to start or reach the server. Throws SettingsError. */
export function resolveServer(partial: Partial<Settings>): ResolvedServer {
  const s: Settings = { ...DEFAULT_SETTINGS, ...stripUndefined(partial) };
  const command = stringList(s.command, "command");
  const token = (s.token ?? "").trim();
  const initializationOptions = token ? { token } : {};
  const env: Record<string, string> = {};
  switch (s.mode) {
    case "command": {
      if (command.length === 0 || command[0] === "") {
        throw new SettingsError("ptxfactory.server.command must name a program, e.g. [\"ptxfactory\", \"lsp\"]");
      }
      return {
        target: { kind: "stdio", command: command[0], args: command.slice(1), env },
        initializationOptions,
        description: command.join(" "),
      };
    }
    case "ssh": {
      const host = (s.sshHost ?? "").trim();
      if (host === "" || host.startsWith("-") || /\s/.test(host)) {
        throw new SettingsError(`ptxfactory.server.sshHost: "${s.sshHost}" is not a host (set it for ssh mode)`);
      }
      if (command.length === 0) {
        throw new SettingsError("ptxfactory.server.command (the command run on the ssh host) is empty");
      }
      const args = ["-T", ...stringList(s.sshArgs, "sshArgs"), host, ...command.map(shellQuote)];
      return { target: { kind: "stdio", command: "ssh", args, env }, initializationOptions, description: `ssh ${host}` };
    }
    case "tcp": {
      const { host, port } = parseTcpAddress(s.tcpAddress ?? "");
      return { target: { kind: "tcp", host, port }, initializationOptions, description: `tcp ${host}:${port}` };
    }
    default:
      throw new SettingsError(`ptxfactory.server.mode: "${String(s.mode)}" is not one of command, ssh, tcp`);
  }
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined && v !== null)) as Partial<T>;
}

/** A kernel the server offers to optimise: from a ptxfactory.optimise code lens. */
export interface KernelLens {
  kernel: string;
  uri: string;
  /** 0-based line and character (the server's position encoding) of the kernel's start. */
  line: number;
  character: number;
}

interface LensLike {
  range: { start: { line: number; character: number } };
  command?: { command: string; arguments?: unknown[] };
}

/** The ptxfactory.optimise lenses of a codeLens answer, by line. */
export function kernelLenses(lenses: readonly LensLike[] | null | undefined): KernelLens[] {
  const out: KernelLens[] = [];
  for (const lens of lenses ?? []) {
    const arg = lens.command?.command === OPTIMISE ? (lens.command.arguments?.[0] as { uri?: unknown; kernel?: unknown }) : undefined;
    if (arg && typeof arg.kernel === "string" && typeof arg.uri === "string") {
      out.push({ kernel: arg.kernel, uri: arg.uri, line: lens.range.start.line, character: lens.range.start.character });
    }
  }
  return out.sort((a, b) => a.line - b.line);
}

/** The kernel for a 0-based cursor line: the last one starting at or above it, else the only one. */
export function kernelAt(kernels: readonly KernelLens[], line: number): KernelLens | undefined {
  let best: KernelLens | undefined;
  for (const k of kernels) {
    if (k.line <= line) {
      best = k;
    }
  }
  return best ?? (kernels.length === 1 ? kernels[0] : undefined);
}

/** Params of ptxfactory/progress (ProgressNotification in protocol/lsp.py). */
export interface ProgressNotification {
  token: string;
  job_id: string;
  uri: string;
  kernel: string;
  kind: "begin" | "report" | "end";
  title?: string;
  message?: string;
  percentage?: number;
}

export interface Job {
  jobId: string;
  /** The progress token ("" for a job only listed by ptxfactory.jobs). */
  token: string;
  uri: string;
  kernel: string;
  running: boolean;
  title?: string;
  message?: string;
  percentage: number;
}

/** The jobs this window knows of: started by our commands or the code lens, followed through ptxfactory/progress. */
export class JobTable {
  private readonly jobs = new Map<string, Job>();
  private order: string[] = [];

  /** Records ptxfactory.optimise's answer ({job_id, token, already_running?}) for its arguments. */
  started(result: { job_id: string; token: string }, args: { uri: string; kernel: string }): Job {
    return this.upsert(result.job_id, { token: result.token, uri: args.uri, kernel: args.kernel });
  }

  /** Applies one progress notification; returns the job and the percentage gained since the last one. */
  progress(p: ProgressNotification): { job: Job; increment: number } {
    const job = this.upsert(p.job_id, { token: p.token, uri: p.uri, kernel: p.kernel });
    let increment = 0;
    if (p.title !== undefined) {
      job.title = p.title;
    }
    if (p.message !== undefined) {
      job.message = p.message;
    }
    if (typeof p.percentage === "number" && p.percentage > job.percentage) {
      increment = p.percentage - job.percentage;
      job.percentage = p.percentage;
    }
    if (p.kind === "end") {
      job.running = false;
    }
    return { job, increment };
  }

  /** Records a job the server listed (ptxfactory.jobs' JobInfo: {job_id, uri, kernel, state, percentage, message}). */
  listed(info: { job_id: string; uri: string; kernel: string; state: string; percentage?: number; message?: string }): Job {
    const job = this.upsert(info.job_id, { token: "", uri: info.uri, kernel: info.kernel });
    job.running = info.state === "queued" || info.state === "running";
    job.percentage = Math.max(job.percentage, info.percentage ?? 0);
    if (info.message) {
      job.message = info.message;
    }
    return job;
  }

  /** Marks a job ended (e.g. ptxfactory.cancel answered that it is no longer running). */
  ended(jobId: string): void {
    const job = this.jobs.get(jobId);
    if (job) {
      job.running = false;
    }
  }

  get(jobId: string): Job | undefined {
    return this.jobs.get(jobId);
  }

  /** Running jobs, newest first. */
  running(): Job[] {
    return this.all().filter((j) => j.running);
  }

  /** Every job, newest first. */
  all(): Job[] {
    return [...this.order].reverse().map((id) => this.jobs.get(id)!);
  }

  /** The newest job for (uri, kernel), if any. */
  latest(uri: string, kernel: string): Job | undefined {
    return this.all().find((j) => j.uri === uri && j.kernel === kernel);
  }

  private upsert(jobId: string, fields: { token: string; uri: string; kernel: string }): Job {
    let job = this.jobs.get(jobId);
    if (!job) {
      job = { jobId, ...fields, running: true, percentage: 0 };
      this.jobs.set(jobId, job);
      this.order.push(jobId);
    } else if (!job.token && fields.token) {
      job.token = fields.token;
    }
    return job;
  }
}

interface ActionLike {
  title: string;
  kind?: string;
  isPreferred?: boolean;
  disabled?: { reason: string };
}

/** The report shown by "ptxfactory: Show report" when the server has no ptxfactory.report: the job's state
 * and last progress message, the faster candidates (preferred first) and the rejected ones with their reasons. */
export function reportMarkdown(kernel: string, job: Job | undefined, actions: readonly ActionLike[] | null | undefined): string {
  const lines = [`# ptxfactory: ${kernel}`, ""];
  if (job) {
    lines.push(`Job ${job.jobId}: ${job.running ? `running, ${job.percentage}%` : "ended"}${job.message ? `, ${job.message}` : ""}`);
  } else {
    lines.push("No job started from this window for this kernel.");
  }
  const ours = (actions ?? []).filter((a) => a.kind === CODE_ACTION_KIND);
  const faster = ours.filter((a) => !a.disabled).map((a) => `- ${a.title}${a.isPreferred ? " (preferred)" : ""}`);
  const rejected = ours.filter((a) => a.disabled).map((a) => `- ${a.title}: ${a.disabled!.reason}`);
  lines.push("", "## Faster candidates (light bulb on the kernel, or \"ptxfactory: Apply best candidate\")", "");
  lines.push(...(faster.length ? faster : ["none"]));
  if (rejected.length) {
    lines.push("", "## Rejected", "", ...rejected);
  }
  return lines.join("\n") + "\n";
}

/** Text of a ptxfactory.report answer (ReportResult: {job_id, path, uri, markdown, shown}); also a plain string,
 * {text}, or anything else as JSON. */
export function reportText(result: unknown): string {
  if (typeof result === "string") {
    return result;
  }
  if (result && typeof result === "object") {
    const r = result as { markdown?: unknown; text?: unknown };
    if (typeof r.markdown === "string") {
      return r.markdown;
    }
    if (typeof r.text === "string") {
      return r.text;
    }
  }
  return "```json\n" + JSON.stringify(result, null, 2) + "\n```\n";
}

/** Registered last on the client, this makes it declare no window.workDoneProgress (vscode-languageclient's own
 * progress feature declares it and would show server-created progress in the status bar). The server then reports
 * each job on ptxfactory/progress, which names the job, kernel and document, and extension.ts shows it in the
 * notification area with a Cancel button. */
export class NotificationProgressFeature implements StaticFeature {
  fillClientCapabilities(capabilities: ClientCapabilities): void {
    if (capabilities.window) {
      capabilities.window.workDoneProgress = false;
    }
  }
  initialize(): void {}
  getState(): FeatureState {
    return { kind: "static" };
  }
  clear(): void {}
}

export type View = "ptx" | "sass";

/** What a ptxfactory://show/JOB/N/KERNEL.VIEW URI names. */
export interface ShowUri {
  jobId: string;
  candidate: number;
  kernel: string;
  view: View;
}

/** Parses a ptxfactory://show/JOB/N/KERNEL.ptx|.sass URI; undefined for anything else. */
export function parseShowUri(uri: string): ShowUri | undefined {
  const m = /^ptxfactory:\/\/show\/([^/]+)\/(\d+)\/([^/]+)\.(ptx|sass)$/.exec(uri);
  return m ? { jobId: m[1], candidate: Number(m[2]), kernel: m[3], view: m[4] as View } : undefined;
}

/** ptxfactory.show's arguments (ShowArgs in protocol/lsp.py): show=false, the extension opens the documents itself. */
export function showArgs(jobId: string, view: View, candidate?: number): { job_id: string; view: View; candidate?: number; show: boolean } {
  return candidate === undefined ? { job_id: jobId, view, show: false } : { job_id: jobId, view, candidate, show: false };
}

/** The original's and the candidate's views of a ptxfactory.show answer (ShowResult). */
export interface ShownViews {
  jobId: string;
  candidate: number;
  view: View;
  originalUri: string;
  originalText: string;
  uri: string;
  text: string;
}

/** A ptxfactory.show answer checked; undefined when it is not one. */
export function shownViews(result: unknown): ShownViews | undefined {
  const r = result as Record<string, unknown> | null;
  if (!r || typeof r !== "object") {
    return undefined;
  }
  const strings = ["job_id", "original_uri", "original_text", "uri", "text"].every((k) => typeof r[k] === "string");
  if (!strings || typeof r.candidate !== "number" || (r.view !== "ptx" && r.view !== "sass")) {
    return undefined;
  }
  return {
    jobId: r.job_id as string,
    candidate: r.candidate,
    view: r.view,
    originalUri: r.original_uri as string,
    originalText: r.original_text as string,
    uri: r.uri as string,
    text: r.text as string,
  };
}

/** The text of a workspace/textDocumentContent answer ({text}); undefined otherwise. */
export function contentText(result: unknown): string | undefined {
  const r = result as { text?: unknown } | null;
  return r && typeof r === "object" && typeof r.text === "string" ? r.text : undefined;
}

/** The diff editor's title for a ptxfactory.show answer: "rmsnorm PTX: original ↔ candidate 2". */
export function viewsTitle(v: ShownViews): string {
  const kernel = parseShowUri(v.uri)?.kernel ?? "kernel";
  const what = v.uri === v.originalUri ? "the original" : `original ↔ candidate ${v.candidate}`;
  return `${kernel} ${v.view.toUpperCase()}: ${what}`;
}

/** The texts of the ptxfactory: documents this window was sent, by URI, the newest kept (at most `max`). */
export class ViewCache {
  private readonly texts = new Map<string, string>();
  constructor(private readonly max = 64) {}

  set(uri: string, text: string): void {
    this.texts.delete(uri);
    this.texts.set(uri, text);
    while (this.texts.size > this.max) {
      this.texts.delete(this.texts.keys().next().value as string);
    }
  }

  get(uri: string): string | undefined {
    return this.texts.get(uri);
  }

  /** Keeps both texts of a ptxfactory.show answer. */
  add(v: ShownViews): void {
    this.set(v.originalUri, v.originalText);
    this.set(v.uri, v.text);
  }

  get size(): number {
    return this.texts.size;
  }
}

/** The candidate number typed in the input box: "" → the best (undefined); a whole number ≥ 0; else an error (string). */
export function parseCandidate(input: string): { candidate?: number } | string {
  const t = input.trim();
  if (t === "") {
    return {};
  }
  return /^\d+$/.test(t) ? { candidate: Number(t) } : `"${t}" is not a candidate number (0 is the original; empty: the best)`;
}
