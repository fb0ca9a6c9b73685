;;; emacs_e2e.el --- editors/emacs.md's snippet in a batch Emacs against the real server  -*- lexical-binding: t -*-
;; Run by tests/editors/test_emacs.py:  emacs --batch -q -l tests/editors/emacs_e2e.el
;; Environment: PTX_SNIPPET (the snippet, extracted from editors/emacs.md), PTX_SERVER (JSON argv),
;; PTX_FILE (a copy of examples/rmsnorm/rmsnorm.cu), PTX_OUT (the buffer after the edit), PTX_RESULT (JSON),
;; PTX_TIMEOUT (seconds per step). Exits 0 when every step passed, else prints "FAIL: ..." and exits 1.
(require 'json)

(defvar e2e-result nil)
(defvar e2e-timeout (string-to-number (or (getenv "PTX_TIMEOUT") "60")))

(defun e2e-step (name)
  (push name e2e-result)
  (message "emacs_e2e: %s" name))

(defun e2e-wait (what predicate)
  (let ((deadline (+ (float-time) e2e-timeout)))
    (while (not (funcall predicate))
      (when (> (float-time) deadline)
        (error "timed out after %ss waiting for %s" e2e-timeout what))
      (accept-process-output nil 0.05))))

(defun e2e-main ()
  (load (getenv "PTX_SNIPPET") nil t)
  (setq ptxfactory-server-command (append (json-read-from-string (getenv "PTX_SERVER")) nil))
  (e2e-step (format "eglot %s, server %S"
                    (or (ignore-errors (package-get-version)) (bound-and-true-p eglot-version) "?")
                    ptxfactory-server-command))
  (find-file (getenv "PTX_FILE"))
  (unless (eq major-mode 'cuda-mode)
    (error "major mode is %s, not cuda-mode" major-mode))
  ;; eglot-ensure connects from post-command-hook, which only an interactive command loop runs.
  (run-hooks 'post-command-hook)
  (e2e-wait "eglot to connect" (lambda () (eglot-current-server)))
  (e2e-step "connected")
  (let ((original (buffer-string)))
    (goto-char (point-min))
    (search-forward "float sum = 0.0f;")
    (ptxfactory-optimise)
    (let ((job ptxfactory--last-job))
      (unless job (error "no job id"))
      (e2e-step (format "job %s" job))
      (e2e-wait "the ptxfactory/progress end"
                (lambda () (equal (plist-get (gethash job ptxfactory--jobs) :state) "ended")))
      (let ((end (plist-get (gethash job ptxfactory--jobs) :message)))
        (e2e-step (format "ended: %s" end))
        (with-temp-file (getenv "PTX_RESULT")
          (insert (json-encode `((end_message . ,end) (job_id . ,job)))))))
    (ptxfactory-apply-best)
    (e2e-wait "the edit" (lambda () (not (equal (buffer-string) original))))
    (e2e-step "applied")
    (write-region nil nil (getenv "PTX_OUT") nil 'silent))
  (let ((server (eglot-current-server)))
    (eglot-shutdown server)
    (e2e-step "shut down")))

(condition-case err
    (progn (e2e-main) (kill-emacs 0))
  (error
   (message "FAIL: %s (steps: %s)" (error-message-string err) (reverse e2e-result))
   (kill-emacs 1)))
