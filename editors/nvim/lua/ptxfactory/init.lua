--- ptxfactory for Neovim 0.11+: starts the ptxfactory language server for CUDA (and PTX) buffers through
--- vim.lsp.config/vim.lsp.enable, and adds
---   :PtxOptimise [KERNEL]  optimise the kernel at the cursor (or KERNEL); progress arrives as LspProgress
---   :PtxCancel [JOB_ID]    cancel the running job of this buffer (or JOB_ID)
---   :PtxReport             the latest results for the kernel at the cursor, in a scratch buffer
---   :PtxCandidates         the "Apply candidate N" code actions at the cursor (ours only)
---   :PtxApplyBest          apply the preferred (fastest) candidate at the cursor without asking
---   :PtxShow [N] [ptx|sass] the PTX (default) or SASS of candidate N (default: the best) of the kernel's latest
---                          job, beside the original's, as read-only ptxfactory:// buffers
--- Buffers named ptxfactory://show/JOB/N/KERNEL.ptx|.sass are read from the server (BufReadCmd:
--- workspace/textDocumentContent, else ptxfactory.show again), so `:edit` on such a URI works too.
---
--- require("ptxfactory").setup{
---   cmd = { "ptxfactory", "lsp" },  -- the server command (argv); e.g. { "ptxfactory", "serve", "--stdio" }
---   ssh = nil,                      -- "gpu-host": run `cmd` on that host through `ssh -T gpu-host ...`
---   tcp = nil,                      -- "127.0.0.1:7777": connect to `ptxfactory serve --tcp 7777`
---   socket = nil,                   -- "/path/to/daemon.sock": connect to the daemon's unix socket
--- }
--- A `cmd` such as { "ssh", "gpu-host", "ptxfactory", "lsp" } works as it is, too.
local M = {}

-- The server's protocol (protocol/lsp.py in ptxfactory).
M.OPTIMISE = "ptxfactory.optimise"
M.CANCEL = "ptxfactory.cancel"
M.REPORT = "ptxfactory.report" -- used only when the server advertises it (the shared daemon)
M.JOBS = "ptxfactory.jobs" -- likewise
M.SHOW = "ptxfactory.show"
M.SCHEME = "ptxfactory" -- the read-only documents of ptxfactory.show: ptxfactory://show/JOB/N/KERNEL.VIEW
M.PROGRESS = "ptxfactory/progress"
M.KIND = "refactor.rewrite.ptxfactory"

M.defaults = {
  name = "ptxfactory",
  cmd = { "ptxfactory", "lsp" },
  ssh = nil,
  ssh_args = {}, -- extra ssh options, e.g. { "-p", "2222" }
  tcp = nil,
  socket = nil,
  token = nil, -- sent to the server as initializationOptions.token (needed over tcp)
  token_file = nil, -- or read it from this file (e.g. a copy of the daemon's <socket>.token)
  filetypes = { "cuda", "ptx" },
  root_markers = { ".git" }, -- else the file's folder is the root
  notify = true, -- vim.notify when a job starts and ends
  commands = true, -- define the :Ptx* commands
}

--- Jobs started from this Neovim, by job id: { job_id, token, uri, kernel, bufnr, client_id, state, message, percentage }.
--- state is "running" until the job's progress ends, then "ended".
M.jobs = {}
local by_token = {}
local seq = 0
M.options = nil

local function notify(msg, level)
  if M.options == nil or M.options.notify then
    vim.notify("ptxfactory: " .. msg, level or vim.log.levels.INFO)
  end
end

local SAFE = "^[%w@%%+=:,./_-]+$"

--- `arg` quoted for a POSIX shell (ssh joins its command's words with spaces for the remote shell).
function M.shell_quote(arg)
  arg = tostring(arg)
  if arg ~= "" and arg:match(SAFE) then
    return arg
  end
  return "'" .. arg:gsub("'", [['"'"']]) .. "'"
end

--- "host:port" or "[v6]:port" → host, port (number). Errors on anything else.
function M.parse_address(address)
  local host, port = address:match("^%[([^%]]+)%]:(%d+)$")
  if not host then
    host, port = address:match("^([^:]+):(%d+)$")
  end
  port = tonumber(port)
  if not host or not port or port < 1 or port > 65535 then
    error(("ptxfactory: tcp = %q is not host:port"):format(address), 0)
  end
  return host, port
end

--- What vim.lsp.config's `cmd` gets for these options: an argv list, or vim.lsp.rpc.connect(...) for tcp/socket.
--- Also returns a description of the connection (for messages).
function M.resolve_cmd(opts)
  local given = 0
  for _, k in ipairs({ "ssh", "tcp", "socket" }) do
    if opts[k] ~= nil then
      given = given + 1
    end
  end
  if given > 1 then
    error("ptxfactory: set at most one of ssh, tcp and socket", 0)
  end
  if opts.tcp then
    local host, port = M.parse_address(opts.tcp)
    return vim.lsp.rpc.connect(host, port), ("tcp %s:%d"):format(host, port)
  end
  if opts.socket then
    return vim.lsp.rpc.connect(vim.fs.normalize(opts.socket)), "socket " .. opts.socket
  end
  local cmd = opts.cmd
  if type(cmd) ~= "table" or #cmd == 0 then
    error("ptxfactory: cmd must be a non-empty list of strings", 0)
  end
  if opts.ssh then
    if type(opts.ssh) ~= "string" or opts.ssh == "" or opts.ssh:sub(1, 1) == "-" then
      error(("ptxfactory: ssh = %q is not a host"):format(tostring(opts.ssh)), 0)
    end
    local argv = { "ssh", "-T" }
    vim.list_extend(argv, opts.ssh_args or {})
    table.insert(argv, opts.ssh)
    for _, a in ipairs(cmd) do
      table.insert(argv, M.shell_quote(a))
    end
    return argv, "ssh " .. opts.ssh
  end
  return vim.deepcopy(cmd), table.concat(cmd, " ")
end

--- The ptxfactory client attached to `bufnr` (default: current buffer), or nil.
function M.client(bufnr)
  local name = (M.options or M.defaults).name
  return vim.lsp.get_clients({ bufnr = bufnr or 0, name = name })[1]
end

local function client_or_warn(bufnr)
  local client = M.client(bufnr)
  if not client then
    notify("no ptxfactory server attached to this buffer", vim.log.levels.WARN)
  end
  return client
end

--- Records a progress value of a job (from $/progress or ptxfactory/progress) and fires `User PtxProgress`.
local function on_progress(token, value)
  local job = by_token[token]
  if not job or type(value) ~= "table" then
    return
  end
  if value.percentage then
    job.percentage = value.percentage
  end
  if value.message then
    job.message = value.message
  end
  if value.kind == "end" then
    job.state = "ended"
    notify(("%s: %s"):format(job.kernel, value.message or "done"))
  elseif job.state == "disconnected" then
    job.state = "running" -- the daemon is back (a reconnected session resumes the job's progress)
  end
  M.disconnected = nil
  vim.api.nvim_exec_autocmds("User", { pattern = "PtxProgress", modeline = false, data = { job = job, value = value } })
end

local function add_job(result, uri, kernel, bufnr, client)
  local job = M.jobs[result.job_id] or {}
  job.job_id, job.token, job.uri, job.kernel = result.job_id, result.token, uri, kernel
  job.bufnr, job.client_id = bufnr, client.id
  job.state = job.state or "running"
  if not job.seq then
    seq = seq + 1
    job.seq = seq
  end
  M.jobs[result.job_id] = job
  by_token[result.token] = job
  M.last_job = job
  return job
end

--- The ptxfactory.optimise code lenses of the buffer, as { kernel, uri, line } sorted by line; calls back.
function M.kernels(bufnr, callback)
  if not bufnr or bufnr == 0 then
    bufnr = vim.api.nvim_get_current_buf()
  end
  local client = client_or_warn(bufnr)
  if not client then
    return
  end
  local params = { textDocument = { uri = vim.uri_from_bufnr(bufnr) } }
  client:request("textDocument/codeLens", params, function(err, lenses)
    if err then
      notify("codeLens failed: " .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    local out = {}
    for _, lens in ipairs(lenses or {}) do
      local c = lens.command
      if c and c.command == M.OPTIMISE and c.arguments and c.arguments[1] then
        table.insert(out, { kernel = c.arguments[1].kernel, uri = c.arguments[1].uri, line = lens.range.start.line, range = lens.range })
      end
    end
    table.sort(out, function(a, b) return a.line < b.line end)
    callback(out, client)
  end, bufnr)
end

--- The kernel for 0-based `line`: the last one starting at or above it, else the only one.
function M.kernel_at(kernels, line)
  local best
  for _, k in ipairs(kernels) do
    if k.line <= line then
      best = k
    end
  end
  if not best and #kernels == 1 then
    best = kernels[1]
  end
  return best
end

local function with_kernel(bufnr, name, callback)
  M.kernels(bufnr, function(kernels, client)
    local found
    if name and name ~= "" then
      for _, k in ipairs(kernels) do
        if k.kernel == name then
          found = k
        end
      end
      found = found or { kernel = name, uri = vim.uri_from_bufnr(bufnr) }
    else
      local line = vim.api.nvim_win_get_cursor(0)[1] - 1
      found = M.kernel_at(kernels, line)
    end
    if not found then
      notify("no kernel here: the spec (<file>.toml) describes none at or above the cursor", vim.log.levels.WARN)
      return
    end
    callback(found, client)
  end)
end

local function request_optimise(client, bufnr, args, on_started)
  local params = { command = M.OPTIMISE, arguments = { args } }
  client:request("workspace/executeCommand", params, function(err, result)
    if err then
      notify(("optimise %s: %s"):format(args.kernel, err.message), vim.log.levels.ERROR)
      return
    end
    local job = add_job(result, args.uri, args.kernel, bufnr, client)
    notify(("%s %s (job %s)"):format(result.already_running and "already optimising" or "optimising", args.kernel, job.job_id))
    if on_started then
      on_started(job)
    end
  end, bufnr)
end

--- Starts ptxfactory.optimise for the kernel at the cursor (or opts.kernel). opts.on_started(job) is called with the job.
function M.optimise(opts)
  opts = opts or {}
  local bufnr = vim.api.nvim_get_current_buf()
  with_kernel(bufnr, opts.kernel, function(k, client)
    request_optimise(client, bufnr, { uri = k.uri, kernel = k.kernel }, opts.on_started)
  end)
end

--- The client-side handler of the "Optimise kernel" code lens (vim.lsp.codelens.run): sends the same request,
--- so the job is known here too (for :PtxCancel and :PtxReport).
local function lens_command(command, ctx)
  local client = vim.lsp.get_client_by_id(ctx.client_id)
  local args = command.arguments and command.arguments[1]
  if client and type(args) == "table" then
    request_optimise(client, ctx.bufnr, args)
  end
end

--- The job to act on: `job_id` if given, else the latest running job of the buffer, else the latest running one.
function M.find_job(job_id, bufnr)
  if job_id and job_id ~= "" then
    return M.jobs[job_id]
  end
  local mine, any
  for _, job in pairs(M.jobs) do
    if job.state == "running" then
      if job.bufnr == bufnr and (mine == nil or job.seq > mine.seq) then
        mine = job
      end
      if any == nil or job.seq > any.seq then
        any = job
      end
    end
  end
  return mine or any
end

local function advertises(client, command)
  local p = client.server_capabilities and client.server_capabilities.executeCommandProvider
  return p and vim.tbl_contains(p.commands or {}, command)
end

local function send_cancel(client, job, opts)
  client:request("workspace/executeCommand", { command = M.CANCEL, arguments = { { job_id = job.job_id } } }, function(err, result)
    if err then
      notify("cancel: " .. err.message, vim.log.levels.ERROR)
      return
    end
    notify(("job %s: %s"):format(job.job_id, result.cancelled and "cancelling" or ("already " .. tostring(result.state))))
    if opts.on_done then
      opts.on_done(result)
    end
  end, job.bufnr)
end

--- Cancels a job (see find_job; when this Neovim started none, the newest queued or running job that the
--- server lists with ptxfactory.jobs, if it has that command). opts.on_done(result) gets {job_id, cancelled, state}.
function M.cancel(opts)
  opts = opts or {}
  local bufnr = vim.api.nvim_get_current_buf()
  local job = M.find_job(opts.job_id, bufnr)
  if job then
    local client = vim.lsp.get_client_by_id(job.client_id)
    if not client then
      notify("the server of job " .. job.job_id .. " is gone", vim.log.levels.WARN)
      return
    end
    return send_cancel(client, job, opts)
  end
  local client = M.client(bufnr)
  if not (client and advertises(client, M.JOBS)) then
    notify("no running job to cancel", vim.log.levels.WARN)
    return
  end
  client:request("workspace/executeCommand", { command = M.JOBS, arguments = { { active = true } } }, function(err, result)
    local listed = (not err and result and result.jobs) or {}
    local uri, pick = vim.uri_from_bufnr(bufnr), nil
    for _, info in ipairs(listed) do -- newest first
      if (opts.job_id == nil or opts.job_id == "" or info.job_id == opts.job_id) and (pick == nil or (info.uri == uri and pick.uri ~= uri)) then
        pick = info
      end
    end
    if not pick then
      notify("no running job to cancel", vim.log.levels.WARN)
      return
    end
    send_cancel(client, { job_id = pick.job_id, bufnr = bufnr }, opts)
  end, bufnr)
end

--- Markdown lines for the kernel's latest results: the job's progress, then the code actions the server offers.
function M.report_lines(kernel, job, actions)
  local lines = { "# ptxfactory: " .. kernel, "" }
  if job then
    table.insert(lines, ("Job %s: %s%s"):format(job.job_id, job.state, job.message and (", " .. job.message) or ""))
  else
    table.insert(lines, "No job started from this editor for this kernel.")
  end
  local faster, rejected = {}, {}
  for _, a in ipairs(actions or {}) do
    if a.kind == M.KIND then
      if a.disabled then
        table.insert(rejected, ("- %s: %s"):format(a.title, a.disabled.reason))
      else
        table.insert(faster, ("- %s%s"):format(a.title, a.isPreferred and " (preferred)" or ""))
      end
    end
  end
  vim.list_extend(lines, { "", "## Faster candidates (:PtxCandidates, :PtxApplyBest)", "" })
  vim.list_extend(lines, #faster > 0 and faster or { "none" })
  if #rejected > 0 then
    vim.list_extend(lines, { "", "## Rejected", "" })
    vim.list_extend(lines, rejected)
  end
  return lines
end

local function show(lines)
  vim.cmd("botright new")
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].buftype, vim.bo[buf].bufhidden, vim.bo[buf].swapfile = "nofile", "wipe", false
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable, vim.bo[buf].filetype = false, "markdown"
  return buf
end

--- Shows the latest results for the kernel at the cursor: the server's ptxfactory.report for an ended job when
--- the server has that command (it writes report.md and opens it), else the job's last progress message and the
--- code actions (faster candidates, and rejected ones where the client shows disabled actions).
--- opts.on_lines(lines) receives the lines instead of a scratch buffer (or the server opening report.md).
function M.report(opts)
  opts = opts or {}
  local bufnr = vim.api.nvim_get_current_buf()
  local out = opts.on_lines or show
  with_kernel(bufnr, opts.kernel, function(k, client)
    local job
    for _, j in pairs(M.jobs) do
      if j.uri == k.uri and j.kernel == k.kernel and (job == nil or j.seq > job.seq) then
        job = j
      end
    end
    local function from_actions()
      local pos = k.range and k.range.start or { line = vim.api.nvim_win_get_cursor(0)[1] - 1, character = 0 }
      local params = {
        textDocument = { uri = k.uri },
        range = { start = pos, ["end"] = pos },
        context = { diagnostics = {}, only = { M.KIND }, triggerKind = 1 },
      }
      client:request("textDocument/codeAction", params, function(err, actions)
        if err then
          notify("codeAction: " .. err.message, vim.log.levels.ERROR)
          return
        end
        M.last_report_source = "actions"
        out(M.report_lines(k.kernel, job, actions))
      end, bufnr)
    end
    if not (job and job.state == "ended" and advertises(client, M.REPORT)) then
      return from_actions()
    end
    -- The daemon writes report.md and opens it itself (window/showDocument) unless asked for the text only.
    local args = { job_id = job.job_id, show = opts.on_lines == nil }
    client:request("workspace/executeCommand", { command = M.REPORT, arguments = { args } }, function(err, result)
      if err or type(result) ~= "table" then
        notify("report: " .. (err and err.message or "no result") .. "; showing the code actions", vim.log.levels.WARN)
        return from_actions()
      end
      M.last_report_source = "server"
      if not result.shown then
        out(vim.split(result.markdown or result.text or vim.inspect(result), "\n", { plain = true }))
      end
    end, bufnr)
  end)
end

--- vim.lsp.buf.code_action limited to our "Apply candidate" actions. opts.preferred keeps only the preferred
--- (fastest) one; opts.apply applies it without asking when exactly one remains.
function M.code_action(opts)
  opts = opts or {}
  vim.lsp.buf.code_action({
    context = { only = { M.KIND }, diagnostics = {}, triggerKind = 1 },
    filter = function(a)
      return a.kind == M.KIND and (not opts.preferred or a.isPreferred == true)
    end,
    apply = opts.apply,
  })
end

M.STOPPED = "the daemon stopped; the job will resume when it restarts"

--- The connection to the server dropped (the daemon stopped or died, ssh went away): the running jobs of that
--- client become "disconnected" (their message says they resume when the daemon restarts), a warning is shown,
--- `User PtxProgress` fires with `data.disconnected = true` and the statusline is redrawn. Called from the LSP
--- client's on_exit; `code`/`signal` are the transport's exit status, if any.
function M.on_disconnect(client_id, code, signal)
  local stopped = {}
  for _, job in pairs(M.jobs) do
    if job.state == "running" and (client_id == nil or job.client_id == client_id) then
      job.state, job.message = "disconnected", M.STOPPED
      table.insert(stopped, job.kernel)
    end
  end
  M.disconnected = { client_id = client_id, code = code, signal = signal }
  local how = (code and code ~= 0) and (" (exit code %d)"):format(code) or ""
  if #stopped > 0 then
    notify(("connection to the server lost%s: %s: %s"):format(how, table.concat(stopped, ", "), M.STOPPED), vim.log.levels.WARN)
  else
    notify(("connection to the server lost%s"):format(how), vim.log.levels.WARN)
  end
  vim.api.nvim_exec_autocmds("User", { pattern = "PtxProgress", modeline = false, data = { disconnected = true, jobs = stopped } })
  pcall(vim.cmd.redrawstatus, { bang = true })
end

--- A one-line status for the statusline: the running jobs' kernels and percentages, jobs whose daemon stopped,
--- "ptx: disconnected" after the connection dropped ("" when idle).
function M.status()
  local parts = {}
  for _, job in pairs(M.jobs) do
    if job.state == "running" then
      table.insert(parts, ("%s %d%%"):format(job.kernel, job.percentage or 0))
    elseif job.state == "disconnected" then
      table.insert(parts, ("%s %d%% (daemon stopped)"):format(job.kernel, job.percentage or 0))
    end
  end
  if #parts > 0 then
    return "ptx: " .. table.concat(parts, ", ")
  end
  return M.disconnected and "ptx: disconnected" or ""
end

--- The token to send: `opts.token`, else the first line of `opts.token_file`, else nil.
function M.token(opts)
  if opts.token then
    return opts.token
  end
  if opts.token_file then
    local ok, lines = pcall(vim.fn.readfile, vim.fn.expand(opts.token_file), "", 1)
    if ok and lines[1] and vim.trim(lines[1]) ~= "" then
      return vim.trim(lines[1])
    end
    notify("cannot read the token file " .. opts.token_file, vim.log.levels.WARN)
  end
  return nil
end

--- Texts of the ptxfactory:// documents this Neovim was sent (ptxfactory.show answers both), by URI.
M.views = {}

--- "ptxfactory://show/JOB/N/KERNEL.VIEW" → { job_id, candidate (number), kernel, view }, or nil.
function M.parse_show_uri(uri)
  local job, n, kernel, view = tostring(uri):match("^ptxfactory://show/([^/]+)/(%d+)/([^/]+)%.(%a+)$")
  if not job or (view ~= "ptx" and view ~= "sass") then
    return nil
  end
  return { job_id = job, candidate = tonumber(n), kernel = kernel, view = view }
end

--- :PtxShow's arguments ("3 sass", "ptx", "") → { candidate = number|nil, view = "ptx"|"sass", job_id = nil|string };
--- anything else is an error (a string) as the second value.
function M.parse_show_args(fargs)
  local out = { view = "ptx" }
  for _, a in ipairs(fargs or {}) do
    if a == "ptx" or a == "sass" then
      out.view = a
    elseif a:match("^%d+$") then
      out.candidate = tonumber(a)
    elseif a:match("^job=") then
      out.job_id = a:sub(5)
    else
      return nil, ("%q is not a candidate number, ptx or sass"):format(a)
    end
  end
  return out
end

--- Lines and filetype of a view's text, for a buffer.
local function fill(buf, text, view)
  vim.bo[buf].modifiable, vim.bo[buf].readonly = true, false
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(text, "\n", { plain = true, trimempty = false }))
  if vim.api.nvim_buf_get_lines(buf, -2, -1, false)[1] == "" and vim.api.nvim_buf_line_count(buf) > 1 then
    vim.api.nvim_buf_set_lines(buf, -2, -1, false, {}) -- the text's final newline
  end
  vim.bo[buf].buftype, vim.bo[buf].swapfile, vim.bo[buf].bufhidden = "nofile", false, "hide"
  vim.bo[buf].modified, vim.bo[buf].modifiable, vim.bo[buf].readonly = false, false, true
  vim.bo[buf].filetype = view == "sass" and "asm" or "ptx"
end

local function any_client()
  local name = (M.options or M.defaults).name
  return M.client(0) or vim.lsp.get_clients({ name = name })[1]
end

local function request_show(client, args, callback)
  args = vim.tbl_extend("force", args, { show = false }) -- opened here, not through window/showDocument
  client:request("workspace/executeCommand", { command = M.SHOW, arguments = { args } }, function(err, result)
    if err or type(result) ~= "table" then
      return callback(nil, err and err.message or "no result")
    end
    M.views[result.original_uri] = result.original_text
    M.views[result.uri] = result.text
    callback(result)
  end)
end

--- BufReadCmd for ptxfactory://*: fills the read-only scratch buffer from the server: workspace/textDocumentContent,
--- else (a server without it, or one that no longer has the document) ptxfactory.show with the URI's job, candidate
--- and view, else the text this Neovim was last sent for that URI. `done(ok)` is called when it has been filled.
function M.read_view(buf, uri, done)
  done = done or function() end
  local parsed = M.parse_show_uri(uri)
  local function use(text)
    if vim.api.nvim_buf_is_valid(buf) then
      fill(buf, text, parsed and parsed.view)
    end
    done(true)
  end
  local function fail(why)
    if M.views[uri] then
      return use(M.views[uri])
    end
    if vim.api.nvim_buf_is_valid(buf) then
      fill(buf, "// ptxfactory: cannot read " .. uri .. ": " .. why, parsed and parsed.view)
    end
    notify(uri .. ": " .. why, vim.log.levels.WARN)
    done(false)
  end
  local client = any_client()
  if not client then
    return fail("no ptxfactory server is running")
  end
  local function by_show(why)
    if not parsed then
      return fail(why)
    end
    request_show(client, { job_id = parsed.job_id, candidate = parsed.candidate, view = parsed.view }, function(result, err)
      if not result then
        return fail(err)
      end
      use(result.uri == uri and result.text or result.original_text)
    end)
  end
  client:request("workspace/textDocumentContent", { uri = uri }, function(err, result)
    if err or type(result) ~= "table" or type(result.text) ~= "string" then
      return by_show(err and err.message or "no text")
    end
    M.views[uri] = result.text
    use(result.text)
  end)
end

--- Opens a view of a ptxfactory.show result: the original's and the candidate's buffers side by side in a new tab
--- (the candidate on the right, with the cursor), read through BufReadCmd. Returns the two buffers.
function M.open_views(result)
  vim.cmd("tab split " .. vim.fn.fnameescape(result.original_uri))
  local left, left_win = vim.api.nvim_get_current_buf(), vim.api.nvim_get_current_win()
  vim.wo[left_win].wrap = false
  if result.uri == result.original_uri then
    return left, left
  end
  vim.cmd("rightbelow vsplit " .. vim.fn.fnameescape(result.uri))
  vim.wo.wrap = false
  return left, vim.api.nvim_get_current_buf()
end

--- The job to show: opts.job_id, else the newest job of this Neovim on the kernel at the cursor (or on the buffer),
--- else (the server lists them) the newest ended job the server has on this buffer's file. Calls back with its id.
local function job_to_show(bufnr, opts, callback)
  if opts.job_id and opts.job_id ~= "" then
    return callback(opts.job_id, any_client())
  end
  local client = client_or_warn(bufnr)
  if not client then
    return
  end
  local uri = vim.uri_from_bufnr(bufnr)
  local function newest(kernel)
    local pick
    for _, j in pairs(M.jobs) do
      if j.uri == uri and j.state ~= "running" and (kernel == nil or j.kernel == kernel) and (pick == nil or j.seq > pick.seq) then
        pick = j
      end
    end
    return pick
  end
  local function from_server(kernel)
    if not advertises(client, M.JOBS) then
      notify("no ended job on this buffer to show: :PtxOptimise first", vim.log.levels.WARN)
      return
    end
    client:request("workspace/executeCommand", { command = M.JOBS, arguments = { { uri = uri } } }, function(err, result)
      for _, info in ipairs((not err and result and result.jobs) or {}) do -- newest first
        if info.state ~= "queued" and info.state ~= "running" and (kernel == nil or info.kernel == kernel) then
          return callback(info.job_id, client)
        end
      end
      notify("no ended job on this buffer to show: :PtxOptimise first", vim.log.levels.WARN)
    end, bufnr)
  end
  M.kernels(bufnr, function(kernels)
    local k = M.kernel_at(kernels, vim.api.nvim_win_get_cursor(0)[1] - 1)
    local kernel = k and k.kernel
    local job = newest(kernel) or (kernel == nil and newest(nil)) or nil
    if job then
      return callback(job.job_id, client)
    end
    from_server(kernel)
  end)
end

--- :PtxShow: the PTX or SASS (opts.view) of candidate opts.candidate (default: the best) of the latest ended job on
--- the kernel at the cursor (or opts.job_id), beside the original's. opts.on_result(result, left_buf, right_buf) is
--- called once both are open.
function M.show(opts)
  opts = opts or {}
  local bufnr = vim.api.nvim_get_current_buf()
  job_to_show(bufnr, opts, function(job_id, client)
    if not client then
      notify("no ptxfactory server is running", vim.log.levels.WARN)
      return
    end
    local args = { job_id = job_id, view = opts.view or "ptx", candidate = opts.candidate }
    request_show(client, args, function(result, err)
      if not result then
        notify(("show %s of job %s: %s"):format(args.view, job_id, err), vim.log.levels.ERROR)
        return
      end
      local left, right = M.open_views(result)
      if opts.on_result then
        opts.on_result(result, left, right)
      end
    end)
  end)
end

local function define_commands()
  local cmd = vim.api.nvim_create_user_command
  cmd("PtxOptimise", function(a) M.optimise({ kernel = a.args }) end,
    { nargs = "?", desc = "ptxfactory: optimise the kernel at the cursor (or KERNEL)" })
  cmd("PtxCancel", function(a) M.cancel({ job_id = a.args }) end,
    { nargs = "?", desc = "ptxfactory: cancel this buffer's running job (or JOB_ID)" })
  cmd("PtxReport", function(a) M.report({ kernel = a.args }) end,
    { nargs = "?", desc = "ptxfactory: results for the kernel at the cursor" })
  cmd("PtxCandidates", function() M.code_action({}) end, { desc = "ptxfactory: the candidates at the cursor" })
  cmd("PtxApplyBest", function() M.code_action({ preferred = true, apply = true }) end,
    { desc = "ptxfactory: apply the preferred candidate at the cursor" })
  cmd("PtxShow", function(a)
    local args, err = M.parse_show_args(a.fargs)
    if not args then
      return notify(":PtxShow: " .. err, vim.log.levels.ERROR)
    end
    M.show(args)
  end, {
    nargs = "*",
    complete = function() return { "ptx", "sass" } end,
    desc = "ptxfactory: the PTX or SASS of candidate N (default: the best) beside the original's",
  })
end

function M.setup(opts)
  -- A shallow merge: list options (cmd, filetypes, ...) replace the defaults whole.
  opts = vim.tbl_extend("force", M.defaults, opts or {})
  M.options = opts
  local cmd, how = M.resolve_cmd(opts)
  M.connection = how

  if vim.filetype.match({ filename = "x.ptx" }) == nil then
    vim.filetype.add({ extension = { ptx = "ptx" } })
  end

  local markers = opts.root_markers
  vim.lsp.config[opts.name] = {
    cmd = cmd,
    filetypes = opts.filetypes,
    root_dir = function(bufnr, on_dir)
      local name = vim.api.nvim_buf_get_name(bufnr)
      if name == "" or vim.startswith(name, M.SCHEME .. "://") then
        return -- no file, or one of our read-only views (not a document for the server)
      end
      on_dir(vim.fs.root(bufnr, markers) or vim.fs.dirname(name))
    end,
    init_options = M.token(opts) and { token = M.token(opts) } or nil,
    commands = { [M.OPTIMISE] = lens_command },
    on_exit = function(code, signal, client_id)
      vim.schedule(function() M.on_disconnect(client_id, code, signal) end)
    end,
    handlers = {
      [M.PROGRESS] = function(_, params)
        if params then
          on_progress(params.token, params)
        end
      end,
    },
  }
  vim.lsp.enable(opts.name)

  local group = vim.api.nvim_create_augroup("ptxfactory", { clear = true })
  vim.api.nvim_create_autocmd("LspProgress", {
    group = group,
    callback = function(ev)
      local p = ev.data and ev.data.params
      if p then
        on_progress(p.token, p.value)
      end
    end,
  })
  vim.api.nvim_create_autocmd("BufReadCmd", {
    group = group,
    pattern = M.SCHEME .. "://*",
    callback = function(ev)
      M.read_view(ev.buf, ev.match)
    end,
  })
  if opts.commands then
    define_commands()
  end
  return M
end

return M
