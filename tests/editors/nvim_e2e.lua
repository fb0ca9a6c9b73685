-- Headless Neovim end to end: our plugin against the real server (run by tests/editors/test_nvim.py).
--   nvim --headless --clean -u NONE -l tests/editors/nvim_e2e.lua
-- Environment:
--   PTX_PLUGIN_DIR  editors/nvim (added to 'runtimepath')
--   PTX_SETUP       JSON: the options of require("ptxfactory").setup{} (cmd, or ssh + cmd, or tcp, or socket)
--   PTX_FILE        the copy of examples/rmsnorm/rmsnorm.cu to open
--   PTX_OUT         where the buffer is written after the preferred candidate is applied
--   PTX_RESULT      where a JSON summary goes (progress kinds, the end message, action titles, the report)
--   PTX_FLOW        "apply" (default): optimise, wait for the progress end, :PtxReport, :PtxShow (the PTX views),
--                   :PtxApplyBest, write;
--                   "cancel": the "Optimise kernel" code lens (vim.lsp.codelens.run) starts the job, :PtxCancel
--                   stops it once the first candidates are reported
--   PTX_TIMEOUT_MS  how long to wait for each step
-- Exits 0 when every step passed; on failure prints "FAIL: ..." on stderr and exits 1.

local env = vim.env
local timeout = tonumber(env.PTX_TIMEOUT_MS or "40000")
local result = { steps = {} }

local function step(name)
  table.insert(result.steps, name)
  io.stderr:write("nvim_e2e: " .. name .. "\n")
end

local function wait(what, predicate)
  if not vim.wait(timeout, predicate, 20) then
    error(("timed out after %d ms waiting for %s"):format(timeout, what), 0)
  end
end

local function write_result()
  if env.PTX_RESULT then
    vim.fn.writefile({ vim.json.encode(result) }, env.PTX_RESULT)
  end
end

local function main()
  vim.opt.runtimepath:prepend((assert(env.PTX_PLUGIN_DIR, "PTX_PLUGIN_DIR")))
  vim.cmd("filetype on")
  vim.opt.swapfile = false

  -- Our own view of the progress, through the same LspProgress event the plugin listens to.
  local progress = {}
  vim.api.nvim_create_autocmd("LspProgress", {
    callback = function(ev)
      table.insert(progress, { token = ev.data.params.token, value = ev.data.params.value })
    end,
  })

  local ptx = require("ptxfactory")
  local opts = vim.json.decode((assert(env.PTX_SETUP, "PTX_SETUP")))
  opts.notify = false
  ptx.setup(opts)
  result.connection = ptx.connection
  step("setup: " .. ptx.connection)

  vim.cmd.edit(vim.fn.fnameescape((assert(env.PTX_FILE, "PTX_FILE"))))
  local buf = vim.api.nvim_get_current_buf()
  result.filetype = vim.bo[buf].filetype
  assert(vim.bo[buf].filetype == "cuda", "filetype is " .. vim.bo[buf].filetype .. ", not cuda")
  wait("the ptxfactory client to initialise", function()
    local c = ptx.client(buf)
    return c ~= nil and c.initialized == true
  end)
  step("client initialised")
  local original = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")

  -- The cursor inside the kernel's body, as a user would put it.
  local line = vim.fn.search("float sum = 0.0f;", "w")
  assert(line > 0, "no 'float sum' line in the example")
  vim.api.nvim_win_set_cursor(0, { line, 4 })

  local flow = env.PTX_FLOW or "apply"
  if flow == "cancel" then
    -- Started from the "Optimise kernel" code lens, as a user would click it (vim.lsp.codelens.run).
    vim.lsp.codelens.refresh({ bufnr = buf })
    wait("the code lens", function() return #vim.lsp.codelens.get(buf) > 0 end)
    local lens = vim.lsp.codelens.get(buf)[1]
    result.lens = lens.command and lens.command.title
    vim.api.nvim_win_set_cursor(0, { lens.range.start.line + 1, 0 })
    vim.lsp.codelens.run()
    step("code lens run: " .. tostring(result.lens))
  else
    vim.cmd("PtxOptimise")
  end
  wait("ptxfactory.optimise to answer", function() return ptx.last_job ~= nil end)
  local job = ptx.last_job
  result.job = { job_id = job.job_id, token = job.token, kernel = job.kernel }
  step("job " .. job.job_id .. " started for " .. job.kernel)
  assert(job.kernel == "rmsnorm", "optimised " .. tostring(job.kernel))

  local function count(kind)
    local n = 0
    for _, p in ipairs(progress) do
      if p.token == job.token and p.value.kind == kind then
        n = n + 1
      end
    end
    return n
  end
  if flow == "cancel" then
    wait("the first progress reports", function() return count("report") >= 2 end)
    vim.cmd("PtxCancel")
    step(":PtxCancel")
  end

  local function ended()
    for _, p in ipairs(progress) do
      if p.token == job.token and p.value.kind == "end" then
        return p
      end
    end
  end
  wait("the job's LspProgress end", ended)
  local kinds = {}
  for _, p in ipairs(progress) do
    if p.token == job.token then
      table.insert(kinds, p.value.kind)
    end
  end
  result.progress_kinds = kinds
  result.end_message = ended().value.message
  step("progress ended: " .. tostring(result.end_message))
  assert(kinds[1] == "begin", "first progress value is " .. tostring(kinds[1]))
  assert(ptx.jobs[job.job_id].state == "ended", "the plugin did not see the end")
  if flow == "cancel" then
    -- Asked again once it has ended, the server says it is already cancelled.
    local answer
    ptx.cancel({ job_id = job.job_id, on_done = function(r) answer = r end })
    wait("ptxfactory.cancel to answer", function() return answer ~= nil end)
    result.cancel = answer
    local client = ptx.client(buf)
    client:stop()
    wait("the client to stop", function() return client:is_stopped() end)
    step("client stopped")
    return
  end

  -- :PtxReport's content (captured instead of shown).
  local report
  ptx.report({ on_lines = function(lines) report = lines end })
  wait(":PtxReport's lines", function() return report ~= nil end)
  result.report = report
  result.report_source = ptx.last_report_source
  step("report: " .. #report .. " lines")

  -- :PtxShow: the best candidate's PTX beside the original's, as ptxfactory:// buffers read from the server.
  local src_win = vim.api.nvim_get_current_win()
  vim.cmd("PtxShow ptx")
  local function views()
    local out = {}
    for _, w in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
      local b = vim.api.nvim_win_get_buf(w)
      local name = vim.api.nvim_buf_get_name(b)
      local first = vim.api.nvim_buf_get_lines(b, 0, 1, false)[1] or ""
      if vim.startswith(name, "ptxfactory://") and vim.startswith(first, "// ptxfactory: PTX of") then
        local text = table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), "\n")
        table.insert(out, { uri = name, first = first, modifiable = vim.bo[b].modifiable, readonly = vim.bo[b].readonly,
          filetype = vim.bo[b].filetype, hot = select(2, text:gsub("hot loop begins", "")),
          attached = #vim.lsp.get_clients({ bufnr = b }), current = w == vim.api.nvim_get_current_win() })
      end
    end
    return out
  end
  wait(":PtxShow's two views", function() return #views() == 2 end)
  result.views = views()
  step(":PtxShow: " .. result.views[1].uri .. " | " .. result.views[2].uri)
  vim.cmd("tabclose")
  vim.api.nvim_set_current_win(src_win)

  -- The titles the server offers at the cursor (what :PtxCandidates lists), then :PtxApplyBest.
  local client = ptx.client(buf)
  local params = vim.lsp.util.make_range_params(0, client.offset_encoding)
  params.context = { diagnostics = {}, only = { ptx.KIND }, triggerKind = 1 }
  local response = client:request_sync("textDocument/codeAction", params, timeout, buf)
  assert(response and not response.err, "codeAction failed: " .. vim.inspect(response))
  result.actions = {}
  for _, a in ipairs(response.result or {}) do
    table.insert(result.actions, { title = a.title, kind = a.kind, preferred = a.isPreferred == true, disabled = a.disabled ~= nil })
  end
  step(#result.actions .. " code action(s)")

  vim.cmd("PtxApplyBest")
  local text
  wait("the preferred candidate's edit", function()
    text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
    return text ~= original
  end)
  step("preferred candidate applied")
  vim.fn.writefile(vim.api.nvim_buf_get_lines(buf, 0, -1, false), (assert(env.PTX_OUT, "PTX_OUT")))

  -- A clean shutdown: shutdown + exit, the server process (or connection) ends.
  client:stop()
  wait("the client to stop", function() return client:is_stopped() end)
  step("client stopped")
end

local ok, err = xpcall(main, debug.traceback)
result.ok = ok
result.error = (not ok) and tostring(err) or nil
write_result()
if not ok then
  io.stderr:write("FAIL: " .. tostring(err) .. "\n")
  os.exit(1)
end
os.exit(0)
