// The login form: shown at start when the daemon requires a login, and again
// whenever an API call answers 401. The daemon sets an HttpOnly session cookie,
// so a successful login is all the UI needs to remember.

import * as api from './api';
import { h } from './dom';
import { busy, errorLine } from './widgets';

/** Shows the login form over everything and resolves once logged in. */
export function showLogin(root: HTMLElement, reason?: string): Promise<void> {
  document.querySelector('.login-screen')?.remove();
  return new Promise((resolve) => {
    const err = errorLine('login-error');
    const password = h('input', {
      type: 'password',
      name: 'password',
      autocomplete: 'current-password',
      'data-test': 'login-password',
      placeholder: 'Password',
      required: true,
    });
    const submit = h('button', { class: 'primary', type: 'submit', 'data-test': 'login-submit' }, 'Log in');
    const form = h(
      'form',
      { class: 'login-box', 'data-test': 'login-form' },
      h('div', { class: 'login-brand' }, h('span', { class: 'logo-mark' }), 'shoal'),
      h('div', { class: 'login-title' }, 'Storage appliance console'),
      reason ? h('div', { class: 'login-reason' }, reason) : null,
      h('label', { class: 'field' }, h('span', { class: 'field-label' }, 'Password'), password),
      err.el,
      submit,
    );
    const screen = h('div', { class: 'login-screen' }, form);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      err.clear();
      try {
        await busy(submit, 'Logging in…', () => api.login(password.value));
        screen.remove();
        resolve();
      } catch (e) {
        err.show(e instanceof api.ApiError && e.status === 401 ? `Login refused: ${e.message}` : e);
        password.select();
      }
    });
    root.appendChild(screen);
    password.focus();
  });
}
